"""A real Apache Kafka cluster on loopback: KRaft nodes as separate JVM processes.

Every node is a combined broker and controller (``process.roles=broker,controller``) with a
static controller quorum of all nodes, started from the ``kafka`` JVM set of the project's
manifest (``pipeline/jvm.py``). ``num_brokers`` nodes give replication factor
``min(N, 3)`` and ``min.insync.replicas`` 2 from three nodes on; transactions work on any
size (their state log is sized to the cluster).

Each node listens on three loopback ports: PLAINTEXT (clients and inter-broker),
SASL_PLAINTEXT with SCRAM-SHA-256/512 (users added by :meth:`KafkaCluster.add_scram_user`)
and its controller port. The cluster owns its data directory (a temporary one unless
given) and deletes it on :meth:`KafkaCluster.stop` only when it created it.

Faults are real: :meth:`KafkaCluster.kill` (SIGKILL), :meth:`~KafkaCluster.pause` /
:meth:`~KafkaCluster.resume` (SIGSTOP / SIGCONT), :meth:`~KafkaCluster.restart`, and the
admin API for records, topics and configs. The broker timings are shortened for tests (a
dead broker is noticed in ~4 s, retention and the log cleaner look every second); they
change when faults show, never what Kafka guarantees.

node.py     one node: its ports, ``server.properties``, JVM command line and process
cluster.py  ``KafkaCluster``: the nodes' life cycle, process faults, readiness
admin.py    topic, record, config and SCRAM-user operations through the admin API
serve.py    ``run_broker_forever`` (``ingest broker``)
"""

from lab.broker.admin import await_leaders
from lab.broker.cluster import KafkaCluster
from lab.broker.node import KAFKA_VERSION, BrokerStartError
from lab.broker.serve import run_broker_forever

__all__ = [
    "KAFKA_VERSION",
    "BrokerStartError",
    "KafkaCluster",
    "await_leaders",
    "run_broker_forever",
]
