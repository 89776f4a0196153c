"""Every row of the tables in docs/trainer.md and docs/gang.md names the tests that would
fail if the row were false. A row added, reworded or removed in the docs fails here until
this register says which tests hold it; a test renamed or removed fails here too."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

T = "tests/trainer/test_trainer.py::"
R = "tests/trainer/test_trainer_recovery.py::"
P = "tests/trainer/test_trainer_preemption.py::"
C = "tests/trainer/test_trainer_cli.py::"
W = "tests/trainer/test_trainer_timeouts.py::"  # waits and timeouts
F = "tests/agents/test_preflight.py::"
E = "tests/trainer/test_trainer_elastic.py::"

TRAINER = {
    # --- command line
    r"`--type example\|scatter-reduce`": [
        T + "test_scatter_reduce_rounds_match_serial",
        C + "test_every_default_of_the_table",
        C + "test_flags_beat_the_environment_and_bad_settings_are_refused",
    ],
    "`--parameter VALUE`": [C + "test_a_run_with_the_defaults_is_what_the_table_says"],
    "`--max-steps N`": [
        C + "test_epochs_steps_log_every_and_seed",
        R + "test_sigterm_to_one_node_saves_the_agreed_step_and_the_retry_resumes",
    ],
    "`--epochs N`": [C + "test_every_default_of_the_table", C + "test_epochs_steps_log_every_and_seed"],
    "`--batch-size N`": [
        C + "test_a_run_with_the_defaults_is_what_the_table_says",
        C + "test_epochs_steps_log_every_and_seed",
    ],
    "`--lr F`, `--momentum F`": [C + "test_a_run_with_the_defaults_is_what_the_table_says"],
    "`--seed N`": [C + "test_epochs_steps_log_every_and_seed", T + "test_two_nodes_two_procs_learn_and_agree"],
    "`--dataset-size N`": [
        C + "test_a_run_with_the_defaults_is_what_the_table_says",
        C + "test_epochs_steps_log_every_and_seed",
    ],
    "`--hidden N`": [C + "test_a_run_with_the_defaults_is_what_the_table_says"],
    "`--log-every N`": [
        C + "test_a_run_with_the_defaults_is_what_the_table_says",
        C + "test_epochs_steps_log_every_and_seed",
    ],
    "`--metrics-file PATH`": [
        T + "test_two_nodes_two_procs_learn_and_agree",
        R + "test_sigterm_to_one_node_saves_the_agreed_step_and_the_retry_resumes",
    ],
    "`--params-file PATH`": [
        T + "test_two_nodes_two_procs_learn_and_agree",
        T + "test_worker_killed_restarts_and_resumes_exactly",
    ],
    "`--checkpoint-dir DIR`": [
        R + "test_node_local_checkpoints_survive_losing_node0s_directory",
        R + "test_restart_count_and_node_rank_directory",
    ],
    "`--checkpoint-every K`": [
        C + "test_a_run_with_the_defaults_is_what_the_table_says",
        R + "test_sigterm_to_one_node_saves_the_agreed_step_and_the_retry_resumes",
    ],
    "`--keep-checkpoints N`": [
        R + "test_damaged_newest_checkpoint_neither_wins_nor_takes_the_slot",
        R + "test_node_local_checkpoints_survive_losing_node0s_directory",
    ],
    r"`--checkpoint-storage shared\|node-local`": [R + "test_node_local_checkpoints_survive_losing_node0s_directory"],
    "`--ignore-bad-checkpoints`": [R + "test_no_readable_checkpoint_is_an_error_unless_told_to_start_over"],
    r"`--device npu\|cuda\|cpu`": [
        T + "test_backend_resolution_and_overrides",
        T + "test_broken_torch_npu_under_torchrun_logs_once_and_trains",
    ],
    r"`--backend hccl\|nccl\|gloo`": [T + "test_backend_resolution_and_overrides"],
    "`--pg-timeout S`": [
        C + "test_flags_beat_the_environment_and_bad_settings_are_refused",
        C + "test_every_default_of_the_table",
    ],
    r"`--grad-sync auto\|ddp\|cpu-buckets`": [T + "test_cpu_bucket_grad_sync_matches_ddp"],
    "`--bucket-mb F`": [T + "test_cpu_bucket_grad_sync_matches_ddp", C + "test_every_default_of_the_table"],
    "`--rounds R`, `--array-size N`": [
        T + "test_scatter_reduce_rounds_match_serial",
        C + "test_every_default_of_the_table",
    ],
    "`--scatter-reduce-fault-rank R`": [T + "test_scatter_reduce_detects_a_wrong_chunk"],
    "`--local-rank N` / `--local_rank N`": [
        T + "test_two_nodes_two_procs_learn_and_agree",
        T + "test_ranks_from_env_rules",
        C + "test_flags_beat_the_environment_and_bad_settings_are_refused",
    ],
    # --- exit status
    "0": [T + "test_two_nodes_two_procs_learn_and_agree"],
    "1": [T + "test_hung_peer_exits_within_pg_timeout", T + "test_scatter_reduce_detects_a_wrong_chunk"],
    "2": [
        C + "test_without_launcher_env_clear_error",
        C + "test_unknown_argument_rejected",
        R + "test_no_readable_checkpoint_is_an_error_unless_told_to_start_over",
    ],
    "75": [
        R + "test_sigterm_to_one_node_saves_the_agreed_step_and_the_retry_resumes",
        P + "test_sigint_and_sighup_stop_every_rank_with_75",
    ],
    # --- environment
    "`RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`": [
        C + "test_without_launcher_env_clear_error",
        C + "test_inconsistent_launcher_env_clear_error",
        T + "test_ranks_from_env_rules",
    ],
    "`TORCHDAG_DEVICE`": [
        T + "test_backend_resolution_and_overrides",
        T + "test_explicit_npu_request_with_broken_torch_npu_is_an_error",
    ],
    "`TORCHDAG_BACKEND`": [T + "test_backend_resolution_and_overrides"],
    "`TORCHDAG_PG_TIMEOUT`": [
        C + "test_flags_beat_the_environment_and_bad_settings_are_refused",
        T + "test_hung_peer_exits_within_pg_timeout",
    ],
    "`TORCHDAG_RESTART`": [
        R + "test_restart_count_and_node_rank_directory",
        P + "test_a_restart_that_finds_no_checkpoint_warns",
    ],
    "`ARGO_PROGRESS_FILE`": [
        "tests/trainer/test_trainer_progress.py::test_progress_is_written_for_argo_by_local_rank_0_only",
        "tests/e2e/test_diagnose_e2e.py::test_diagnose_status_and_logs_name_the_failed_rank_its_cause_and_fix",
    ],
    "`TORCHDAG_STALL_REPORT`": [
        "tests/trainer/test_trainer_progress.py::test_a_stalled_step_is_reported_until_the_next_one",
        "tests/diagnose/test_diagnose.py::test_a_sigstopped_rank_is_the_hang_while_others_wait_and_after_their_timeout",
    ],
    "`TORCHDAG_RECORD`": [
        "tests/trainer/test_trainer.py::test_hung_peer_exits_within_pg_timeout",
        "tests/agents/test_flight.py::test_recording_off",
        "tests/e2e/test_diagnose_records_e2e.py::test_root_hang_loop_and_straggler_named_from_the_ranks_records",
    ],
    "`TORCHDAG_STATUS_FILE`": [
        R + "test_sigterm_to_one_node_saves_the_agreed_step_and_the_retry_resumes",
        P + "test_a_stop_signal_before_the_first_step_has_its_default_action",
    ],
    "`GROUP_RANK`": [
        R + "test_restart_count_and_node_rank_directory",
        R + "test_node_local_checkpoints_survive_losing_node0s_directory",
    ],
    "`GLOO_SOCKET_IFNAME`, `HCCL_SOCKET_IFNAME`, `HCCL_IF_IP`, `NCCL_SOCKET_IFNAME`": [
        F + "test_nic_env_per_device",
        F + "test_exec_exports_nic_and_passes_argv_verbatim",
        "tests/netns/test_netns.py::test_rendered_nic_env_trains_across_hosts_with_different_nic_names",
    ],
    "`TORCH_DEVICE_BACKEND_AUTOLOAD`": [
        "tests/trainer/test_ascend_wheel.py::test_the_trainer_turns_autoload_off_itself_unless_told_otherwise"
    ],
    # --- stopping, measured (the tests hold the behaviour and the grace period, not the seconds)
    "node 1's torchrun, 2x2, SimpleNet, `--max-restarts=1`": [
        R + "test_sigterm_to_one_node_saves_the_agreed_step_and_the_retry_resumes"
    ],
    "node 0's torchrun, 2x2, SimpleNet": [P + "test_sigint_to_the_master_nodes_torchrun"],
    "both torchruns (an Argo stop), 2x2, SimpleNet, `--max-restarts=1`": [
        P + "test_sigterm_to_every_node_at_once_is_an_argo_stop"
    ],
    "node 1's torchrun, 2x1, `--hidden 60000 --batch-size 1024` (~1.6 s steps, 10 MB checkpoints)": [
        W + "test_sigterm_during_slow_steps_stops_after_the_current_step"
    ],
    # --- failure model
    "SIGTERM/SIGINT/SIGHUP to any node (Argo stop, deadline, eviction, drain, Ctrl-C), or straight to any worker": [
        R + "test_sigterm_to_one_node_saves_the_agreed_step_and_the_retry_resumes",
        P + "test_sigint_and_sighup_stop_every_rank_with_75",
        P + "test_sigint_to_the_master_nodes_torchrun",
        P + "test_sigterm_to_every_node_at_once_is_an_argo_stop",
        R + "test_sigterm_on_the_cpu_bucket_path_stops_every_rank_with_75",
        P + "test_stop_agreement_of_the_nccl_path_across_two_ranks",
    ],
    "a worker crashes or is SIGKILLed (OOM)": [T + "test_worker_killed_restarts_and_resumes_exactly"],
    "a whole node dies (pod gone)": [T + "test_dead_node_fails_fast_then_job_retry_resumes",
                                     E + "test_with_min_nodes_two_of_three_go_on_without_the_lost_one"],
    "one node's pod is deleted or evicted, `recovery: node`": [
        E + "test_a_node_whose_pod_is_deleted_rejoins_and_the_others_keep_their_agents"],
    "a node hangs, or the network is cut": [T + "test_hung_peer_exits_within_pg_timeout"],
    "a disk is lost (`shared`: rank 0's; `node-local`: any one node's)": [
        P + "test_a_restart_that_finds_no_checkpoint_warns",
        R + "test_node_local_checkpoints_survive_losing_node0s_directory",
    ],
    "checkpoint files damaged (truncated, bit flips, foreign)": [
        R + "test_damaged_newest_checkpoint_neither_wins_nor_takes_the_slot",
        R + "test_check_detects_truncation_and_load_detects_flipped_bits",
    ],
    "every checkpoint damaged": [R + "test_no_readable_checkpoint_is_an_error_unless_told_to_start_over"],
    "a stop signal arrives before the first training step": [
        P + "test_a_stop_signal_before_the_first_step_has_its_default_action"
    ],
    "the grace period runs out (steps or the checkpoint write too slow)": [
        W + "test_a_grace_period_that_runs_out_is_a_kill"
    ],
    # --- survivors
    "crashes or is killed (sockets reset)": [T + "test_dead_node_fails_fast_then_job_retry_resumes"],
    "hangs, or the network is cut (sockets stay open)": [T + "test_hung_peer_exits_within_pg_timeout"],
    "never arrives at init": [
        W + "test_a_peer_that_never_arrives_at_init_fails_after_the_pg_timeout",
        W + "test_a_node_that_never_joins_is_bounded_by_the_rendezvous_timeout",
    ],
    "gets SIGTERM (through its torchrun)": [R + "test_sigterm_to_one_node_saves_the_agreed_step_and_the_retry_resumes"],
    # --- preflight
    "NIC exists and has IPv4": [F + "test_missing_nic", F + "test_nic_without_ipv4_is_fatal"],
    "hostname not loopback": [
        F + "test_loopback_hostname_without_nic_is_the_writeups_failure",
        "tests/netns/test_netns.py::test_loopback_hostname_without_nic_fails_and_preflight_names_cause_and_fix",
    ],
    "master name resolves": [
        "tests/agents/test_preflight_dns.py::test_a_worker_waits_for_the_masters_name_then_its_port",
        "tests/agents/test_preflight_dns.py::test_a_name_that_never_resolves_is_one_line_within_the_bound",
        "tests/agents/test_preflight_dns.py::test_the_real_resolver_never_sees_the_name_and_the_launcher_never_starts",
    ],
    "master reachable": [F + "test_unreachable_master_gives_up_after_timeout", F + "test_master_waits_for_late_master"],
    "master port free": [F + "test_busy_master_port"],
    "devices cover nproc": [F + "test_device_count_must_cover_nproc", F + "test_exec_not_run_without_the_devices"],
    "any": [F + "test_nic_env_per_device", F + "test_exec_exports_nic_and_passes_argv_verbatim"],
    "npu": [F + "test_nic_env_per_device"],
    "cuda": [F + "test_nic_env_per_device"],
}

GANG = {
    "`volcano`": [
        "tests/render/test_gang.py::test_every_training_pod_joins_the_one_gang_of_n",
        "tests/validators/test_gang_crds.py::test_rendered_podgroup_matches_crd",
    ],
    "`kueue`": ["tests/render/test_gang.py::test_every_training_pod_joins_the_one_gang_of_n"],
    "`coscheduling`": [
        "tests/render/test_gang.py::test_every_training_pod_joins_the_one_gang_of_n",
        "tests/validators/test_gang_crds.py::test_rendered_podgroup_matches_crd",
    ],
}

REGISTER = {"docs/trainer.md": TRAINER, "docs/gang.md": GANG}


def table_rows(text: str) -> list[str]:
    """The first cell of every body row of every Markdown table."""
    rows, lines = [], text.splitlines()
    for index, line in enumerate(lines[:-1]):
        if (
            line.startswith("|")
            and re.fullmatch(r"\|[\s:|-]+\|", lines[index + 1])
            and not (index and lines[index - 1].startswith("|"))
        ):
            for body in lines[index + 2 :]:
                if not body.startswith("|"):
                    break
                rows.append(re.split(r"(?<!\\)\|", body)[1].strip())
    return rows


def defined_tests(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_table_row_names_its_tests():
    for doc, register in REGISTER.items():
        rows = table_rows((REPO / doc).read_text(encoding="utf-8"))
        assert len(rows) == len(set(rows)), (
            f"{doc}: two rows start alike: {sorted(r for r in rows if rows.count(r) > 1)}"
        )
        assert [row for row in rows if row not in register] == [], (
            f"{doc}: rows without tests in tests/house/test_doc_tables.py"
        )
        assert [row for row in register if row not in rows] == [], (
            f"{doc}: the register names rows the doc no longer has"
        )


def test_the_named_tests_exist():
    cache: dict[str, set[str]] = {}
    missing = []
    for register in REGISTER.values():
        for row, tests in register.items():
            assert tests, row
            for test in tests:
                file, name = test.split("::")
                if file not in cache:
                    cache[file] = defined_tests(REPO / file)
                if name not in cache[file]:
                    missing.append(test)
    assert missing == []


def test_table_rows_are_read_as_written():
    text = "intro\n| a | b |\n| --- | --- |\n| `x\\|y` | 1 |\n| two | 2 |\n\n| not a table |\n"
    assert table_rows(text) == ["`x\\|y`", "two"]
    assert table_rows((REPO / "docs" / "gang.md").read_text(encoding="utf-8")) == [
        "`volcano`",
        "`kueue`",
        "`coscheduling`",
    ]
