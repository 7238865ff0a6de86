"""SparkSession construction and runtime checks (Java present)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pipeline.errors import EnvironmentProblem
from pipeline.spark.worker_daemon import daemon_conf, preload

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JAVA_FIX = (
    "install Java 17 (Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless) "
    "or set JAVA_HOME to a Java 17+ installation"
)


def check_java() -> str:
    """Return the Java version; raise EnvironmentProblem naming the fix when absent/too old."""
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise EnvironmentProblem(f"Java was not found (JAVA_HOME / PATH); {JAVA_FIX}")
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EnvironmentProblem(f"`{java} -version` failed ({e}); {JAVA_FIX}") from None
    text = out.stderr + out.stdout
    m = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not m:
        raise EnvironmentProblem(f"cannot tell the Java version from `java -version`; {JAVA_FIX}")
    major = int(m.group(1))
    if major == 1 and m.group(2):
        major = int(m.group(2))
    if major < 17:
        raise EnvironmentProblem(f"Java {major} found, Spark 4 needs Java 17+; {JAVA_FIX}")
    return text.splitlines()[0] if text else str(major)


def session_options(
    app_name: str,
    master: str | None,
    conf: Mapping[str, str],
    *,
    given: Mapping[str, str],
    suggested: Mapping[str, str],
) -> dict[str, str]:
    """The session's settings: ours and ``suggested`` (the source reader's) fill the gaps
    of ``given`` (a spark-submit JVM's conf); ``master`` and ``conf`` (the pipeline
    config's) win over both."""
    options = {"spark.app.name": app_name}
    log4j = os.path.join(
        os.path.dirname(os.path.dirname(__file__)), "resources", "log4j2.properties"
    )
    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.python.worker.reuse": "true",
        "spark.sql.streaming.stopActiveRunOnRestart": "true",
        **suggested,
    }
    if os.path.isfile(log4j):  # not when the package runs from a --py-files zip
        java_opts = f"-Dlog4j2.configurationFile=file:{log4j}"
        defaults["spark.driver.extraJavaOptions"] = java_opts
        defaults["spark.executor.extraJavaOptions"] = java_opts
    if master:
        options["spark.master"] = master
    elif not os.environ.get("SPARK_MASTER"):
        defaults["spark.master"] = os.environ.get("INGEST_DEFAULT_MASTER", "local[*]")
    # Under spark-submit the JVM's conf already holds its --master, --conf and properties
    # file: our defaults only fill the gaps (a builder option would override them: a
    # `spark-submit --master spark://…` then ran everything in local[*]).
    options.update({k: v for k, v in defaults.items() if k not in given})
    options.update(conf)
    options.update(daemon_conf(options, given))  # on the master the session runs on
    return options


def build_spark(
    app_name: str,
    master: str | None,
    conf: Mapping[str, str] | None = None,
    *,
    jars: Sequence[str] = (),
    suggested: Mapping[str, str] | None = None,
    class_archive: bool = True,
    driver_jit: Literal["c1", "tiered"] = "c1",
) -> SparkSession:
    """pyspark is imported here, not at module level, so `ingest --help` stays fast.
    ``jars``: added to ``spark.jars`` (the source reader's); under spark-submit they must
    be on its command line (``--jars``: scripts/spark-submit.sh), the JVM being up.
    ``suggested``: the source reader's settings (``session_options``)."""
    check_java()
    # Executors' Python must be the driver's (same venv, same packages).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if (master or "local").startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no interface guessing
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    given = _submitted_conf()
    options = session_options(app_name, master, conf or {}, given=given, suggested=suggested or {})
    if jars:
        given_jars = [j for j in options.get("spark.jars", "").split(",") if j]
        options["spark.jars"] = ",".join([*given_jars, *(j for j in jars if j not in given_jars)])
    java_opts = options.get("spark.driver.extraJavaOptions", "")
    if not given and (jit := jit_option(driver_jit, java_opts)):
        options["spark.driver.extraJavaOptions"] = f"{java_opts} {jit}".strip()
    dump = None
    if class_archive and not given and SparkContext._active_spark_context is None:
        # the JVM starts here: map the class archive, or (one process at a time) dump it
        from pipeline.spark.class_archive import directory, java_options

        option, dump = java_options(directory())
        if option:
            java_opts = options.get("spark.driver.extraJavaOptions", "")
            options["spark.driver.extraJavaOptions"] = f"{java_opts} {option}".strip()
    sigint = signal.getsignal(signal.SIGINT)
    _launch_jvm(options)
    builder = SparkSession.builder
    for k, v in options.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    if _handles(sigint) and threading.current_thread() is threading.main_thread():
        # SparkContext replaced it with one raising KeyboardInterrupt into any py4j call
        signal.signal(signal.SIGINT, sigint)
    spark.sparkContext.setLogLevel(os.environ.get("INGEST_SPARK_LOG_LEVEL", "WARN"))
    if dump is not None:
        from pipeline.spark.class_archive import remember_class_path

        remember_class_path(dump)
    return spark


#: spark.driverJit -> the driver JVM's option. c1: its quick compiler only: tiered
#: compilation's C2 spent more CPU compiling during a run's first minute than its code
#: saved, on both readers (docs/bench.md, "The driver JVM's JIT")
JIT_OPTIONS = {"c1": "-XX:TieredStopAtLevel=1", "tiered": ""}


def jit_option(driver_jit: Literal["c1", "tiered"], java_options: str) -> str:
    """The option ``driver_jit`` adds to the driver's ``java_options``: none where those
    already set a compilation level (the user's wins)."""
    if "TieredStopAtLevel" in java_options or "TieredCompilation" in java_options:
        return ""
    return JIT_OPTIONS[driver_jit]


def _submitted_conf() -> dict[str, str]:
    """What spark-submit (or another launcher that started the JVM and handed us its
    gateway) already set; empty when this program will start the JVM itself."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return {}
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to that JVM: SparkConf() then reads it
    return dict(SparkConf().getAll())


def _handles(handler: object) -> bool:
    """A handler of this program's own (``ingest run``'s graceful stop)."""
    return callable(handler) and handler is not signal.default_int_handler


def _launch_jvm(options: Mapping[str, str]) -> None:
    """Start the driver JVM ourselves when the program needs more than PySpark's default:

    - ``INGEST_LOG_FILE`` (``ingest run`` at default verbosity): the JVM's stderr (log4j's
      console, its own warnings, Python workers' output) is appended to that file, so
      stderr keeps only the one-line error;
    - a SIGTERM handler of ours (graceful stop): the JVM starts with SIGTERM ignored (an
      ignored signal survives exec, and the JVM then installs no handler of its own), so a
      signal to the whole process group (``tini -g``, a terminal) stops only the driver,
      which stops Spark between batches. SIGKILL of the group still ends both.

    No-op when a JVM already runs (spark-submit started it, or an earlier session)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    log_file = os.environ.get("INGEST_LOG_FILE")
    ours = signal.getsignal(signal.SIGTERM)
    if not (log_file or _handles(ours)):
        return
    if SparkContext._active_spark_context is not None or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return
    conf = SparkConf(loadDefaults=False).setAll(list(options.items()))
    with contextlib.ExitStack() as stack:
        popen: dict[str, Any] = {}
        if log_file:
            popen["stderr"] = stack.enter_context(open(log_file, "ab"))  # Popen dups it
        if _handles(ours):
            # a SIGTERM in this ~1 s window is dropped; the pod's grace period still ends it
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            stack.callback(signal.signal, signal.SIGTERM, ours)
        gateway = launch_gateway(conf, popen_kwargs=popen)
    SparkContext(conf=conf, gateway=gateway)  # the builder's getOrCreate picks it up


def _warm_task(_: object) -> list[int]:
    # the task path's own imports (the first real task then only unpickles its plan); a
    # worker forked from the pipeline's daemon has them already
    preload()
    return [0]


# the job group of warm-up jobs (a thread's property: set on the warm-up's own thread)
WARM_UP_GROUP = "ingest-warm-up"


def warm_up(spark: Any, *, rdd: bool = True, sql: bool = True) -> None:
    """Start the Python workers a batch would start (a warm standby's take-over then
    waits for none): one trivial task per core, importing what the task path imports, on
    the kinds of job a batch runs -- an RDD's (the arrow engine reading its ranges) and a
    SQL ``mapInArrow`` (the rows of Spark's Kafka source), whose workers Spark keeps apart."""
    sc = spark.sparkContext
    keys = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
    before = {k: sc.getLocalProperty(k) for k in keys}  # the calling thread's, put back
    sc.setJobGroup(WARM_UP_GROUP, "ingest: starting the Python workers")
    try:
        n = max(1, int(sc.defaultParallelism))
        if rdd:
            sc.parallelize(range(n), n).mapPartitions(_warm_task).count()
        if sql:
            spark.range(n, numPartitions=n).mapInArrow(_warm_arrow, "id LONG").count()
    finally:
        for k, v in before.items():
            sc.setLocalProperty(k, v)


def warm_up_in_background(spark: Any, *, rdd: bool, sql: bool) -> threading.Thread:
    """:func:`warm_up` on a thread of its own, for a run with no standby (which warmed up
    while it waited): the first batch's tasks would otherwise wait for the worker daemon to
    import the task path before its first fork and pay the workers' first
    task; here the workers' first tasks overlap Spark's start of the query. The daemon's
    own start does not: Spark starts Python processes one at a time
    (``SparkEnv.createPythonWorker`` is synchronized), so the query's data source processes
    wait for it (docs/bench.md, "Start-up, take-over and the cost of a batch"). A failure is
    only logged: the batch starts the workers itself then, and reports its own errors."""

    def run() -> None:
        try:
            warm_up(spark, rdd=rdd, sql=sql)
        except Exception as e:  # e.g. the session stopped under it
            log.debug("warming up the Python workers failed: %s", e)

    thread = threading.Thread(target=run, name="ingest-warm-up", daemon=True)
    thread.start()
    return thread


def _warm_arrow(batches: Iterator[Any]) -> Iterator[Any]:
    preload()  # as _warm_task, in a SQL mapInArrow's worker
    yield from batches
