"""The rotation: every test outside CI's stages runs in one CI run out of every eight.

CI's stages leave out two kinds of test: those marked ``extended`` (variants too slow for
every run) and the drills of ``ingest drill --matrix full`` outside CI's drill subset
(``tests/integration/lab/test_drills.py::_in_ci_subset``). Each of them belongs to one of :data:`SHARES`
shares here. A CI run executes the share of the commit it tests: the commit's height in
its history (``git rev-list --count HEAD``) modulo :data:`SHARES`, so any :data:`SHARES`
consecutive commits run every one of them, and a failure fails CI like any other test.
The left-out drills run as ``tests/integration/lab/test_drills.py::test_left_out_drills[<share>]``, the
drills of :data:`DRILLS` given that share.

``tests/unit/repo/test_rotation.py`` checks that the shares cover each such test exactly once.
A new ``extended`` test must be given a share here, or that test fails.

By hand (from the repository root)::

    python tests/support/rotation.py                  # the share of HEAD and why
    python tests/support/rotation.py --share 2        # what share 2 holds
    INGEST_ROTATION_SHARE=2 ./scripts/run-tests.sh    # CI with share 2 (or: all)
    INGEST_ROTATION_SHARE=all INGEST_SKIP_DEFAULT=1 INGEST_SKIP_SLOW=1 INGEST_SKIP_DRILLS=1 \
        ./scripts/run-tests.sh                        # only the rotation, every share
"""

# ruff: noqa: E501 -- pytest node ids are not wrapped
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

SHARES = 8
ROOT = Path(__file__).resolve().parents[2]

# the node id of each test marked ``extended`` (drills apart) -> its share. Eight shares
# since 2026-11-29, when a four-share run (share 3: 1,372 s and unfinished) took CI past
# its 90 minutes on a slow host: each share's extended tests, drills, core tests on Spark's
# Kafka source and other Spark lines add up to 406-413 s by the times noted here (a fast
# host's), placed longest first, drills first so that every share has one
EXTENDED: dict[str, int] = {
    "tests/integration/commit/test_recovery_spark.py::test_driver_killed_at_every_fault_point[postgresql]": 5,  # 110 s
    "tests/integration/formats/hudi/test_hudi_pipeline.py::test_driver_killed_at_every_fault_point": 3,  # 101 s
    "tests/integration/runtime/test_graceful_stop.py::test_sigterm_in_every_phase_of_a_batch_iceberg[after-requested]": 7,  # 36 s
    "tests/integration/runtime/test_graceful_stop.py::test_sigterm_in_every_phase_of_a_batch_iceberg[after-write]": 6,  # 35 s
    "tests/integration/runtime/test_graceful_stop.py::test_sigterm_in_every_phase_of_a_batch_iceberg[after-precommit]": 5,  # 31 s
    "tests/integration/runtime/test_graceful_stop.py::test_sigterm_in_every_phase_of_a_batch_iceberg[after-commit]": 7,  # 32 s
    "tests/integration/runtime/test_graceful_stop.py::test_sigterm_mid_batch_and_idle_hudi": 2,  # 30 s
    "tests/integration/runtime/test_graceful_stop.py::test_stop_cut_short_then_second_signal_then_resume[hudi]": 4,  # 42 s
    "tests/integration/commit/test_fencing.py::test_second_driver_fences_the_first": 4,  # 25 s
    "tests/integration/commit/test_recovery_spark.py::test_recommit_does_not_recompute": 3,  # 25 s
    "tests/integration/commit/test_recovery_spark.py::test_worker_killed_mid_write_is_retried_without_duplicates": 0,  # 16 s
    "tests/integration/formats/hudi/test_hudi_pipeline.py::test_worker_killed_mid_write_leaves_no_duplicate": 0,  # 15 s
    "tests/integration/formats/hudi/test_hudi_s3.py::test_pipeline_into_hudi_on_s3_exactly_once_recovery_and_lost_checkpoint": 5,  # 37 s
    "tests/integration/commit/test_dual_pipeline.py::test_crash_between_the_two_table_commits[same-checkpoint]": 4,  # 27 s
    "tests/integration/commit/test_outages.py::test_catalog_outage_at_batch_start_and_mid_commit_waits_and_resumes": 7,  # 18 s
    "tests/integration/formats/iceberg/test_pipeline_iceberg.py::test_unreachable_broker_is_one_clear_line": 3,  # 16 s
    "tests/integration/lab/test_broker.py::test_leader_killed_and_paused_loses_nothing": 3,  # 53 s
    "tests/integration/ops/test_cli.py::test_spark_submit_of_main_py_from_a_checkout": 1,  # 16 s
    "tests/integration/decode/test_registry_avro.py::test_new_versions_while_running_evolve_the_table_once_and_lose_nothing[hudi]": 0,  # 25 s
    "tests/integration/decode/test_registry_avro.py::test_a_registry_that_goes_away_mid_run_stops_the_run_with_nothing_half_written": 7,  # 9 s
    "tests/integration/lab/test_peers_spark_sinks.py::test_peer_drains_the_topic_exactly_once[spark-iceberg-sink]": 1,  # ~25 s
    "tests/integration/lab/test_peers_spark_sinks.py::test_peer_drains_the_topic_exactly_once[spark-hudi-sink]": 6,  # ~60 s
    "tests/integration/lab/test_peers_spark_sinks.py::test_iceberg_peer_stops_on_sigterm_and_resumes": 2,  # ~25 s
    "tests/integration/lab/test_peers_kafka_connect.py::test_iceberg_kafka_connect_exactly_once": 6,  # ~20 s
    "tests/integration/lab/test_peers_kafka_connect.py::test_iceberg_kafka_connect_many_tables": 1,  # ~21 s
    "tests/integration/lab/test_bench.py::test_the_tables_section_routes_topics_to_tables_exactly_once": 5,  # 60 s
    "tests/integration/formats/hudi_spark/test_hudi_spark_pipeline.py::test_routed_topics_through_hudis_spark_writer_are_exactly_once_across_a_kill": 0,  # 37 s
    "tests/integration/formats/test_routes.py::test_the_many_tables_example_runs_as_documented": 6,  # ~20 s
    "tests/integration/decode/test_registry_avro.py::test_the_avro_demo_passes_its_own_check": 5,  # 22 s
    "tests/integration/decode/test_registry_protobuf.py::test_protobuf_records_of_two_versions_land_once_with_their_values[hudi]": 0,  # 2 s
    "tests/integration/decode/test_schema_evolution.py::test_three_restarts_evolve_the_table_and_keep_every_record_once[both]": 3,  # 6 s
    "tests/integration/decode/test_schema_evolution.py::test_a_refused_change_is_one_line_exit_2_and_touches_nothing[hudi-drop-column 'price': is in the table but not configured]": 5,  # 6 s
    "tests/integration/decode/test_schema_evolution.py::test_a_driver_killed_around_the_schema_change_loses_nothing[hudi-after-precommit:kill]": 2,  # 38 s
    # moved from the slow stage for CI's budget when the PySpark 3.5 stage came (2026-11-28)
    "tests/integration/formats/hudi/test_hudi_table_services.py::test_hudi_clustering_and_cleaner_run_by_hand_break_nothing": 2,  # 111 s
    "tests/integration/commit/test_outages.py::test_leaders_killed_mid_batch_and_mid_commit_and_paused_lose_nothing": 7,  # 62 s
    "tests/integration/formats/hudi/test_jvm_hudi_reader.py::test_hudi_spark_reads_snapshots_commits_increments_and_time_travel[s3]": 0,  # 56 s
    "tests/integration/formats/hudi/test_jvm_hudi_reader.py::test_hudi_spark_reads_a_trimmed_unpartitioned_table_written_beside_iceberg": 2,  # 66 s
    # the image built on PySpark 3.5.7 (2026-11-28): 112 s to build on a warm base, 46 s cached
    "tests/integration/deploy/test_deploy_image.py::test_image_on_pyspark_35_runs_spark_kafka_source": 6,  # 160 s
    # Hudi's own Spark writer (2026-11-28): its kill test runs in the PySpark 3.5 stage
    "tests/integration/formats/hudi_spark/test_hudi_spark_pipeline.py::test_an_unpartitioned_table_reads_the_same_in_every_reader": 0,  # 70 s
    # (a share's rotation stage took 1,012 s with it and the containers test on a fresh clone)
    "tests/integration/formats/hudi_spark/test_hudi_spark_pipeline.py::test_tables_on_s3_are_exactly_once_across_kills": 0,  # 90-144 s
    # the default stage's ten minutes (2026-11-29: 557 s before): CLI cases that wait out
    # the broker timeout (run's stays in the default stage)
    "tests/integration/ops/test_cli_errors.py::test_operator_errors_are_one_line_exit_2_and_create_nothing[bench-unreachable-broker]": 6,  # 10 s
    "tests/integration/ops/test_cli_errors.py::test_operator_errors_are_one_line_exit_2_and_create_nothing[drill-unreachable-broker]": 1,  # 10 s
    "tests/integration/ops/test_cli_errors.py::test_operator_errors_are_one_line_exit_2_and_create_nothing[produce-unreachable-broker]": 4,  # 10 s
    # the pipeline's image against Kafka's image through testcontainers on podman's API,
    # its container SIGKILLed twice (2026-11-29); 69-77 s with both images cached, 163 s
    # when the image's dependency layer is rebuilt
    "tests/integration/deploy/test_containers.py::test_pipeline_image_sigkilled_twice_against_kafka_image_is_exactly_once": 3,  # 69 s
    # every system of the peers section (2026-11-29; CI's slow stage runs three of them):
    # 530 s on a slow host from a fresh checkout, which builds PySpark 4.1's environment here
    "tests/integration/lab/test_peers_section.py::test_systems_move_the_data_set_once_and_are_measured[every-system]": 1,  # ~250 s
    "tests/integration/lab/test_peers_section.py::test_sigkills_under_a_live_producer_are_counted_exactly_once": 2,  # ~60 s
}

# the drills of the full matrix outside CI's subset: (label, table format) -> share
DRILLS: dict[tuple[str, str], int] = {
    ("broker-outage", "iceberg"): 1,  # 112 s
    ("broker-outage", "hudi"): 5,  # 77 s
    ("retention", "iceberg"): 5,  # 51 s
    ("retention", "hudi"): 3,  # 46 s
    ("standby", "hudi"): 3,  # 85 s (2 SIGKILLs of the active and a pause)
    ("executor-loss", "hudi"): 7,  # 62 s
    ("zombie", "iceberg"): 4,  # 37 s
    ("task-failure", "iceberg"): 6,  # 52 s
    ("checkpoint-deleted", "hudi"): 2,  # 34 s
    ("schema-change", "iceberg"): 6,  # 64 s
    ("schema-change", "hudi"): 7,  # 59 s
    ("avro-schema-change", "iceberg"): 2,  # 92 s
    ("avro-schema-change", "hudi"): 4,  # 85 s
    ("kill", "both"): 0,  # 134 s (9 SIGKILLs)
    # routed sets (2026-12-08; timed on a host shared with other Spark jobs, load ~10;
    # CI's default stage crashes a routed set between its tables' commits:
    # tests/integration/formats/test_routes.py)
    ("routed-kill", "iceberg"): 1,  # 258 s (121 s at load ~2)
    ("routed-route-change", "iceberg"): 6,  # 316 s
    ("routed-new-topic", "iceberg"): 7,  # 149 s
    ("routed-checkpoint-deleted", "iceberg"): 4,  # 185 s (twenty tables)
    ("routed-zombie", "iceberg"): 2,  # 121 s
}

LEFT_OUT_DRILLS = "tests/integration/lab/test_drills.py::test_left_out_drills"

# the exactly-once core (tests marked ``core``) once more on the default Spark with
# ``INGEST_SOURCE_READER=spark`` (Spark's Kafka source): node id -> share. CI runs the
# core every time on PySpark 3.5 with that reader, and tests/integration/source/test_spark_reader.py (which
# sets the reader itself) every time on the default Spark.
CORE_ON_SPARK_READER: dict[str, int] = {
    "tests/integration/commit/test_recovery_spark.py::test_driver_killed_at_every_fault_point[postgresql]": 5,
    "tests/integration/formats/hudi/test_hudi_pipeline.py::test_driver_killed_at_every_fault_point": 4,
    "tests/integration/commit/test_recovery_spark.py::test_recommit_does_not_recompute": 7,
    "tests/integration/formats/iceberg/test_pipeline_iceberg.py::test_exactly_once_with_dead_letters_restart_and_replay": 6,
    "tests/integration/formats/hudi/test_hudi_pipeline.py::test_exactly_once_with_dead_letters_replay_and_lost_checkpoint": 5,
    "tests/integration/commit/test_dead_letters_once.py::test_dead_letters_once_when_the_repair_fails_before_its_precommit[iceberg]": 3,
    "tests/integration/commit/test_dead_letters_once.py::test_dead_letters_once_when_the_repair_fails_before_its_precommit[hudi]": 2,
}

# the other Spark lines users run: tests/integration/source/test_spark_reader.py (Spark's Kafka source: its
# options, error paths, both decode engines, exactly once) in a virtual environment of
# that PySpark (scripts/spark-line-env.sh): version -> share. 3.5 has a CI stage of its
# own; the default install runs it in the default stage.
OTHER_SPARK_LINES: dict[str, int] = {
    "4.1.1": 7,  # the 4.1 line's first release on PyPI: the source jar is 4.1.3 (pom.xml)
    "4.0.5": 4,
}
SPARK_LINE_TESTS = "tests/integration/source/test_spark_reader.py"


def spark_lines(share: int) -> list[str]:
    return sorted(v for v, s in OTHER_SPARK_LINES.items() if s == share)


def drills_of(share: int) -> list[tuple[str, str]]:
    return sorted(key for key, s in DRILLS.items() if s == share)


def node_ids(share: int) -> list[str]:
    """The pytest node ids of one share: its extended tests and its left-out drills."""
    tests = sorted(node for node, s in EXTENDED.items() if s == share)
    return [*tests, f"{LEFT_OUT_DRILLS}[{share}]"]


def core_node_ids(share: int) -> list[str]:
    """The core tests a share runs again with Spark's Kafka source on the default Spark."""
    return sorted(node for node, s in CORE_ON_SPARK_READER.items() if s == share)


def _git(*args: str) -> str | None:
    """``git <args>``'s output in this checkout (None: no git, or not a checkout)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def commit_height(rev: str = "HEAD") -> int | None:
    """How many commits lead to ``rev`` (None: not a git checkout, or a shallow one)."""
    if _git("rev-parse", "--is-shallow-repository") != "false":
        return None
    count = _git("rev-list", "--count", rev)
    return int(count) if count else None


def commit_sha(rev: str = "HEAD") -> str | None:
    return _git("rev-parse", rev)


def chosen_share(rev: str = "HEAD") -> tuple[list[int], str]:
    """(shares to run, why): ``INGEST_ROTATION_SHARE`` (a number or ``all``) when set,
    else the share of ``rev``'s height; in a shallow clone the share of its hash; outside
    git share 0."""
    forced = os.environ.get("INGEST_ROTATION_SHARE", "").strip()
    if forced == "all":
        return list(range(SHARES)), "INGEST_ROTATION_SHARE=all"
    if forced:
        share = int(forced) if forced.isdigit() else -1
        if not 0 <= share < SHARES:
            raise SystemExit(f"rotation: INGEST_ROTATION_SHARE={forced}: 0..{SHARES - 1} or all")
        return [share], f"INGEST_ROTATION_SHARE={share}"
    height = commit_height(rev)
    if height is None:  # a shallow clone: the commit's hash still picks (no 4-run window)
        sha = commit_sha(rev)
        if sha is None:
            return [0], "not a git checkout: share 0 (set INGEST_ROTATION_SHARE)"
        share = int(sha[:8], 16) % SHARES
        return [share], f"shallow clone: commit {sha[:12]}'s hash mod {SHARES} = {share}"
    share = height % SHARES
    return [
        share
    ], f"commit {rev} is commit #{height} of its history; {height} mod {SHARES} = {share}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--share", help=f"0..{SHARES - 1} or all (default: the commit's)")
    parser.add_argument("--commit", default="HEAD", help="the commit whose share to pick")
    parser.add_argument("--nodes", action="store_true", help="print only the node ids")
    parser.add_argument(
        "--core-nodes",
        action="store_true",
        help="print only the core tests to run again with INGEST_SOURCE_READER=spark",
    )
    parser.add_argument(
        "--spark-lines",
        action="store_true",
        help=f"print only the PySpark versions to run {SPARK_LINE_TESTS} on",
    )
    ns = parser.parse_args(argv)
    if ns.share is not None:
        shares = list(range(SHARES)) if ns.share == "all" else [int(ns.share)]
        why = f"--share {ns.share}"
    else:
        shares, why = chosen_share(ns.commit)
    nodes = [n for s in shares for n in node_ids(s)]
    if ns.spark_lines or ns.nodes or ns.core_nodes:
        if ns.spark_lines:
            chosen = [v for s in shares for v in spark_lines(s)]
        else:
            chosen = [n for s in shares for n in core_node_ids(s)] if ns.core_nodes else nodes
        for line in chosen:  # one per line, none at all for an empty list
            print(line)
        return 0
    print(f"rotation share(s) {', '.join(map(str, shares))} of {SHARES} ({why}):")
    for share in shares:
        drills = ", ".join(f"{label} on {fmt}" for label, fmt in drills_of(share))
        print(
            f"  share {share}: {len(node_ids(share)) - 1} extended tests; drills: {drills}; "
            f"{len(core_node_ids(share))} core tests on Spark's Kafka source; "
            f"PySpark {', '.join(spark_lines(share)) or '(none)'}: {SPARK_LINE_TESTS}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
