"""Hudi's table lock on S3 (our helper's ``ingest.hudi.ConditionalPutLockProvider``), as
Hudi's lock manager instantiates it, driven through py4j on PySpark 3.5 (the line Hudi's
Spark bundle is served for).

    s3_lock.py BASE ENDPOINT ACCESS_KEY SECRET_KEY

Two providers (two writers) on the table at ``BASE``: the first takes the lock, the second
waits and is refused; the second cannot release the first's lock; the first releases it
and the second takes it. Then a holder that never releases (a killed driver): with the
expiry at 0.05 minutes a third provider takes the lock once it is 3 s old. The last line
printed is a JSON document of what each step returned.
"""

from __future__ import annotations

import json
import sys
import time

from pipeline.formats.hudi_spark.client import SESSION_SETTINGS, jars
from pipeline.spark.session import build_spark
from pipeline.storage.s3_settings import S3Settings


def main(argv: list[str]) -> int:
    base, endpoint, access, secret = argv
    s3 = S3Settings.from_properties(
        {"s3.endpoint": endpoint, "s3.access-key-id": access, "s3.secret-access-key": secret}
    )
    spark = build_spark(
        "s3-lock", "local[1]", {**SESSION_SETTINGS, **s3.hadoop_conf()}, jars=jars()
    )
    jvm = spark.sparkContext._jvm
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    storage = jvm.org.apache.hudi.storage.hadoop.HadoopStorageConfiguration(hadoop)
    unit = jvm.java.util.concurrent.TimeUnit.MILLISECONDS

    def provider(expire: str) -> object:
        props = jvm.org.apache.hudi.common.config.TypedProperties()
        props.setProperty("hoodie.base.path", base)
        props.setProperty("hoodie.write.lock.filesystem.expire", expire)
        config = jvm.org.apache.hudi.common.config.LockConfiguration(props)
        return jvm.ingest.hudi.ConditionalPutLockProvider(config, storage)

    first, second = provider("1"), provider("1")
    out: dict[str, object] = {"lock": str(first.getLock())}
    out["first"] = bool(first.tryLock(0, unit))
    started = time.monotonic()
    out["second_while_held"] = bool(second.tryLock(1500, unit))
    out["second_waited_s"] = round(time.monotonic() - started, 2)
    second.unlock()  # not its lock: must leave it
    out["second_after_its_unlock"] = bool(provider("1").tryLock(0, unit))
    first.unlock()
    out["second_after_release"] = bool(second.tryLock(0, unit))
    # `second` now holds it and never releases, as a SIGKILLed driver would not
    third = provider("0.05")
    out["third_at_once"] = bool(third.tryLock(0, unit))
    started = time.monotonic()
    out["third_after_expiry"] = bool(third.tryLock(20_000, unit))
    out["third_waited_s"] = round(time.monotonic() - started, 2)
    third.unlock()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
