"""librdkafka's mock cluster driven through ctypes: only for injected protocol errors.

Every test, drill and benchmark runs on real Apache Kafka (``lab.broker``). This
mock stays for what no real broker does on demand: answering chosen requests with chosen
error codes (``push_request_errors``) and recording the requests it received. It implements
neither read_committed isolation nor timestamp look-ups, and keeps ~5 MB per partition.

The mock cluster lives inside the librdkafka shared library that ships in the
confluent-kafka wheel. It listens on real localhost TCP sockets, so any Kafka client in
any process (including Spark executors) can use :attr:`MockCluster.bootstrap_servers`.

Limits worth knowing: every partition keeps at most
5 MB / 100k message sets (older data is deleted); the admin API's CreateTopics,
CreatePartitions and DeleteRecords are not implemented (use the methods here); read_committed
isolation and timestamp look-ups are not implemented.

The mock API is experimental in librdkafka and not ABI-stable, so every symbol is looked
up and declared explicitly here; optional ones are checked for with ``hasattr``.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import confluent_kafka

__all__ = [
    "MockCluster",
    "MockRequest",
    "librdkafka_path",
]

_RD_KAFKA_PRODUCER = 0
_RD_KAFKA_CONF_OK = 0
_ERRSTR_SIZE = 512

_lib_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


def librdkafka_path() -> str:
    """Path of the librdkafka shared library bundled with the installed confluent-kafka.

    Linux wheels keep it in ``site-packages/confluent_kafka.libs/librdkafka-<hash>.so.1``;
    macOS wheels in ``confluent_kafka/.dylibs/``. Using that exact file (rather than a
    system librdkafka) means ctypes shares the copy ``confluent_kafka.cimpl`` already loaded.
    """
    pkg_dir = os.path.dirname(os.path.abspath(confluent_kafka.__file__))
    site_dir = os.path.dirname(pkg_dir)
    patterns = [
        os.path.join(site_dir, "confluent_kafka.libs", "librdkafka*.so*"),
        os.path.join(pkg_dir, ".dylibs", "librdkafka*.dylib"),
        os.path.join(site_dir, "confluent_kafka.libs", "librdkafka*.dylib"),
        os.path.join(pkg_dir, "librdkafka*.dll"),
    ]
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    raise RuntimeError(
        f"librdkafka shared library not found next to confluent_kafka ({pkg_dir}); "
        "the embedded broker needs the library shipped in the confluent-kafka wheel"
    )


def _declare(lib: ctypes.CDLL, name: str, restype: Any, argtypes: list[Any]) -> None:
    func = getattr(lib, name)
    func.restype = restype
    func.argtypes = argtypes


def _load() -> ctypes.CDLL:
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        lib = ctypes.CDLL(librdkafka_path())
        vp, cp, i32, i64 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int64
        cint = ctypes.c_int
        # core API
        _declare(lib, "rd_kafka_conf_new", vp, [])
        _declare(lib, "rd_kafka_conf_destroy", None, [vp])
        _declare(lib, "rd_kafka_conf_set", cint, [vp, cp, cp, cp, ctypes.c_size_t])
        _declare(lib, "rd_kafka_new", vp, [cint, vp, cp, ctypes.c_size_t])
        _declare(lib, "rd_kafka_destroy", None, [vp])
        _declare(lib, "rd_kafka_err2name", cp, [cint])
        _declare(lib, "rd_kafka_err2str", cp, [cint])
        # mock cluster API (rdkafka_mock.h)
        _declare(lib, "rd_kafka_mock_cluster_new", vp, [vp, cint])
        _declare(lib, "rd_kafka_mock_cluster_destroy", None, [vp])
        _declare(lib, "rd_kafka_mock_cluster_bootstraps", cp, [vp])
        _declare(lib, "rd_kafka_mock_topic_create", cint, [vp, cp, cint, cint])
        _declare(lib, "rd_kafka_mock_broker_set_down", cint, [vp, i32])
        _declare(lib, "rd_kafka_mock_broker_set_up", cint, [vp, i32])
        _declare(lib, "rd_kafka_mock_partition_set_leader", cint, [vp, cp, i32, i32])
        _declare(
            lib,
            "rd_kafka_mock_push_request_errors_array",
            None,
            [vp, ctypes.c_int16, ctypes.c_size_t, ctypes.POINTER(cint)],
        )
        _declare(lib, "rd_kafka_mock_clear_request_errors", None, [vp, ctypes.c_int16])
        optional: dict[str, tuple[Any, list[Any]]] = {
            "rd_kafka_mock_partition_delete_records": (cint, [vp, cp, i32, i64]),
            "rd_kafka_mock_group_initial_rebalance_delay_ms": (None, [vp, i32]),
            "rd_kafka_mock_topic_delete": (cint, [vp, cp]),
            "rd_kafka_mock_broker_set_rtt": (cint, [vp, i32, cint]),
            "rd_kafka_mock_start_request_tracking": (None, [vp]),
            "rd_kafka_mock_stop_request_tracking": (None, [vp]),
            "rd_kafka_mock_clear_requests": (None, [vp]),
            "rd_kafka_mock_get_requests": (
                ctypes.POINTER(vp),
                [vp, ctypes.POINTER(ctypes.c_size_t)],
            ),
            "rd_kafka_mock_request_id": (i32, [vp]),
            "rd_kafka_mock_request_api_key": (ctypes.c_int16, [vp]),
            "rd_kafka_mock_request_timestamp": (i64, [vp]),
            "rd_kafka_mock_request_destroy_array": (None, [ctypes.POINTER(vp), ctypes.c_size_t]),
        }
        for name, (restype, argtypes) in optional.items():
            if hasattr(lib, name):
                _declare(lib, name, restype, argtypes)
        _lib = lib
        return lib


def _err_name(lib: ctypes.CDLL, err: int) -> str:
    raw = lib.rd_kafka_err2name(err)
    return raw.decode() if raw else f"error {err}"


@dataclass(frozen=True)
class MockRequest:
    """One protocol request received by the mock cluster (request tracking)."""

    broker_id: int
    api_key: int
    timestamp_us: int


class MockCluster:
    """librdkafka mock cluster with ``num_brokers`` brokers (ids ``1..num_brokers``).

    The cluster is owned by a plain ``rd_kafka_t`` producer handle created here and kept
    alive for the cluster's whole life; :meth:`stop` destroys the cluster, then the handle.
    """

    def __init__(self, num_brokers: int = 1) -> None:
        if num_brokers < 1:
            raise ValueError("num_brokers must be >= 1")
        self.num_brokers = num_brokers
        self._lock = threading.RLock()
        self._lib: ctypes.CDLL | None = None
        self._rk: int | None = None
        self._mc: int | None = None
        self._bootstrap: str | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> MockCluster:
        """Start the cluster; a no-op when already started."""
        with self._lock:
            if self._mc is not None:
                return self
            lib = _load()
            errstr = ctypes.create_string_buffer(_ERRSTR_SIZE)
            conf = lib.rd_kafka_conf_new()
            if not conf:
                raise RuntimeError("rd_kafka_conf_new failed")
            settings = {"client.id": "embedded-broker", "log_level": "3"}
            for key, value in settings.items():
                rc = lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), errstr, _ERRSTR_SIZE)
                if rc != _RD_KAFKA_CONF_OK:
                    lib.rd_kafka_conf_destroy(conf)
                    raise RuntimeError(f"rd_kafka_conf_set({key}) failed: {errstr.value!r}")
            rk = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, _ERRSTR_SIZE)
            if not rk:
                lib.rd_kafka_conf_destroy(conf)  # rd_kafka_new owns conf only on success
                raise RuntimeError(f"rd_kafka_new failed: {errstr.value.decode(errors='replace')}")
            mc = lib.rd_kafka_mock_cluster_new(rk, self.num_brokers)
            if not mc:
                lib.rd_kafka_destroy(rk)
                raise RuntimeError("rd_kafka_mock_cluster_new failed")
            if hasattr(lib, "rd_kafka_mock_group_initial_rebalance_delay_ms"):
                lib.rd_kafka_mock_group_initial_rebalance_delay_ms(mc, 0)
            raw = lib.rd_kafka_mock_cluster_bootstraps(mc)
            self._lib, self._rk, self._mc = lib, rk, mc
            self._bootstrap = raw.decode() if raw else ""
            return self

    def stop(self) -> None:
        """Destroy the cluster and its owning handle; a no-op when not started."""
        with self._lock:
            lib, rk, mc = self._lib, self._rk, self._mc
            self._rk = self._mc = None
            self._bootstrap = None
            if lib is None:
                return
            if mc is not None:
                lib.rd_kafka_mock_cluster_destroy(mc)
            if rk is not None:
                lib.rd_kafka_destroy(rk)

    @property
    def running(self) -> bool:
        return self._mc is not None

    def __enter__(self) -> MockCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()

    # ------------------------------------------------------------------ helpers
    def _cluster(self) -> tuple[ctypes.CDLL, int]:
        if self._lib is None or self._mc is None:
            raise RuntimeError("MockCluster is not started")
        return self._lib, self._mc

    def _check(self, lib: ctypes.CDLL, err: int, what: str) -> None:
        if err != 0:
            detail = lib.rd_kafka_err2str(err)
            text = detail.decode() if detail else ""
            raise RuntimeError(f"{what} failed: {_err_name(lib, err)}: {text}")

    def _need(self, lib: ctypes.CDLL, symbol: str) -> None:
        if not hasattr(lib, symbol):
            raise NotImplementedError(f"this librdkafka build does not export {symbol}")

    # ------------------------------------------------------------------ API
    @property
    def bootstrap_servers(self) -> str:
        """Comma-separated ``host:port`` list of the mock brokers."""
        with self._lock:
            if self._bootstrap is None:
                raise RuntimeError("MockCluster is not started")
            return self._bootstrap

    def create_topic(self, topic: str, partitions: int, replication_factor: int = 1) -> None:
        """Create ``topic`` with ``partitions`` partitions whose replicas are spread over
        the brokers. Raises ``RuntimeError`` with librdkafka's error name on failure, e.g.
        ``TOPIC_ALREADY_EXISTS`` for an existing topic: the mock cannot add partitions to a
        topic (neither here nor through the admin API's CreatePartitions)."""
        with self._lock:
            lib, mc = self._cluster()
            err = lib.rd_kafka_mock_topic_create(mc, topic.encode(), partitions, replication_factor)
            self._check(lib, err, f"create_topic({topic!r}, {partitions})")

    def delete_topic(self, topic: str) -> None:
        with self._lock:
            lib, mc = self._cluster()
            self._need(lib, "rd_kafka_mock_topic_delete")
            err = lib.rd_kafka_mock_topic_delete(mc, topic.encode())
            self._check(lib, err, f"delete_topic({topic!r})")

    def broker_down(self, broker_id: int) -> None:
        """Disconnect broker ``broker_id`` (-1: all) and refuse new connections.
        Leadership does not move (use :meth:`set_partition_leader`)."""
        with self._lock:
            lib, mc = self._cluster()
            self._check(lib, lib.rd_kafka_mock_broker_set_down(mc, broker_id), "broker_down")

    def broker_up(self, broker_id: int) -> None:
        """Accept connections on broker ``broker_id`` (-1: all) again."""
        with self._lock:
            lib, mc = self._cluster()
            self._check(lib, lib.rd_kafka_mock_broker_set_up(mc, broker_id), "broker_up")

    def set_broker_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every response of ``broker_id`` (-1: all) by ``rtt_ms``."""
        with self._lock:
            lib, mc = self._cluster()
            self._need(lib, "rd_kafka_mock_broker_set_rtt")
            err = lib.rd_kafka_mock_broker_set_rtt(mc, broker_id, rtt_ms)
            self._check(lib, err, "set_broker_rtt")

    def set_partition_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Move the leader of ``topic``/``partition`` to ``broker_id`` (-1: leaderless)."""
        with self._lock:
            lib, mc = self._cluster()
            err = lib.rd_kafka_mock_partition_set_leader(mc, topic.encode(), partition, broker_id)
            self._check(lib, err, f"set_partition_leader({topic!r}, {partition}, {broker_id})")

    def push_request_errors(self, api_key: int, errors: Sequence[int]) -> None:
        """Make the next ``len(errors)`` requests with ``api_key`` (e.g. 1 = Fetch,
        0 = Produce, 2 = ListOffsets) fail with these error codes, in order, on any broker.
        ``-195`` (``_TRANSPORT``) makes the broker drop the connection instead."""
        with self._lock:
            lib, mc = self._cluster()
            arr = (ctypes.c_int * len(errors))(*errors)
            lib.rd_kafka_mock_push_request_errors_array(mc, api_key, len(errors), arr)

    def clear_request_errors(self, api_key: int) -> None:
        with self._lock:
            lib, mc = self._cluster()
            lib.rd_kafka_mock_clear_request_errors(mc, api_key)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> None:
        """Delete the records of ``topic``/``partition`` below ``before_offset`` so the log
        start offset (low watermark) moves up, as retention would on a real broker.

        Uses ``rd_kafka_mock_partition_delete_records`` (exported by the librdkafka in
        confluent-kafka 2.16). Builds without it raise ``NotImplementedError``; retention
        can still be exercised there by producing past the mock's per-partition cap
        (5 MB / 100k message sets), which deletes the oldest data.
        ``before_offset`` beyond the high watermark fails with OFFSET_OUT_OF_RANGE.
        """
        with self._lock:
            lib, mc = self._cluster()
            self._need(lib, "rd_kafka_mock_partition_delete_records")
            err = lib.rd_kafka_mock_partition_delete_records(
                mc, topic.encode(), partition, before_offset
            )
            self._check(lib, err, f"delete_records({topic!r}, {partition}, {before_offset})")

    # --------------------------------------------------------- request tracking
    def start_request_tracking(self) -> None:
        """Record every protocol request the cluster receives (see :meth:`requests`)."""
        with self._lock:
            lib, mc = self._cluster()
            self._need(lib, "rd_kafka_mock_start_request_tracking")
            lib.rd_kafka_mock_start_request_tracking(mc)

    def stop_request_tracking(self) -> None:
        with self._lock:
            lib, mc = self._cluster()
            self._need(lib, "rd_kafka_mock_stop_request_tracking")
            lib.rd_kafka_mock_stop_request_tracking(mc)

    def clear_requests(self) -> None:
        with self._lock:
            lib, mc = self._cluster()
            self._need(lib, "rd_kafka_mock_clear_requests")
            lib.rd_kafka_mock_clear_requests(mc)

    def requests(self) -> list[MockRequest]:
        """Requests received since tracking started (or the last :meth:`clear_requests`).
        ``api_key`` values: 8 OffsetCommit, 9 OffsetFetch, 10 FindCoordinator, 11 JoinGroup,
        14 SyncGroup, 12 Heartbeat, 1 Fetch, 2 ListOffsets, 3 Metadata."""
        with self._lock:
            lib, mc = self._cluster()
            self._need(lib, "rd_kafka_mock_get_requests")
            cnt = ctypes.c_size_t(0)
            arr = lib.rd_kafka_mock_get_requests(mc, ctypes.byref(cnt))
            out: list[MockRequest] = []
            if not arr:
                return out
            try:
                for i in range(cnt.value):
                    req = arr[i]
                    out.append(
                        MockRequest(
                            broker_id=int(lib.rd_kafka_mock_request_id(req)),
                            api_key=int(lib.rd_kafka_mock_request_api_key(req)),
                            timestamp_us=int(lib.rd_kafka_mock_request_timestamp(req)),
                        )
                    )
            finally:
                lib.rd_kafka_mock_request_destroy_array(arr, cnt.value)
            return out
