"""Mutation testing of tpujob's core: plant one small bug at a time in a module (a comparison,
an arithmetic or boolean operator, a number, a `not`), run only the tests that cover that
module, and count the mutants the tests kill. A mutant that survives is a guarantee no test
holds: add the test it calls for, or judge it equivalent (docs/testing.md lists those).

    python tools/mutation.py                       # every module in MODULES, resumable
    python tools/mutation.py trainer/tpujob_plan/mesh.py --budget 600
    python tools/mutation.py --shard 0/2 & python tools/mutation.py --shard 1/2
    python tools/mutation.py --report              # the table and the survivors so far

Each run copies the source roots and tests into `.mutation/work-<shard>-<pid>/` and mutates
only that copy (the checkout is never touched), so shards run side by side. Every mutant's outcome is
appended to `.mutation/results.jsonl`, keyed by the module's source hash: a run that stops
(`--budget` seconds, Ctrl-C) picks up where it left off, a module that changed is tested again,
and survivors are tried again on every run (a test added since may kill them). Tests run in a child forked from a process that has already imported pytest and the
heavy libraries, with `-x`, so a killed mutant costs a fraction of a second.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import shutil
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATE = ROOT / ".mutation"
RESULTS = STATE / "results.jsonl"
COPIED = ("operator", "trainer", "tests", "charts", "manifests", "docs", "pyproject.toml")
PER_MUTANT_TIMEOUT_S = 120.0

PLAN_TESTS = ["tests/plan/test_slice_plan.py", "tests/plan/test_catalog.py",
              "tests/plan/test_memory_and_flops.py", "tests/plan/test_mesh.py",
              "tests/plan/test_layers.py", "tests/plan/test_generations_facts.py",
              "tests/plan/test_gpu_plan.py"]
# GPU jobs through the path a user takes: validate_job, the JobSet, `tpujob plan`.
GPU_TESTS = ["tests/plan/test_gpu_plan.py", "tests/builders/test_gpu_jobs.py",
             "tests/plan/test_plan_output.py", "tests/plan/test_zero_memory.py"]
BUILDER_TESTS = ["tests/builders/test_builder_pins.py", "tests/builders/test_jobset.py",
                 "tests/builders/test_fingerprint.py", "tests/builders/test_validation.py",
                 "tests/builders/test_wiring.py", "tests/builders/test_restart_strategy.py",
                 "tests/builders/test_local_checkpoints.py", "tests/builders/test_invocation.py",
                 "tests/builders/test_scheduling.py", "tests/builders/test_gpu_jobs.py"]
VALIDATION_TESTS = ["tests/builders/test_validation_pins.py", "tests/builders/test_validation.py",
                    "tests/builders/test_foreign_preflight.py",
                    "tests/builders/test_config_error_field_unit.py",
                    "tests/controller/test_admission.py", "tests/hostile/test_hostile_jobs.py",
                    "tests/builders/test_job_file_fields.py", "tests/builders/test_invocation.py",
                    "tests/builders/test_scheduling.py", "tests/builders/test_gpu_jobs.py"]
CONFIG_TESTS = ["tests/trainer/test_config_fields.py", "tests/trainer/test_config.py",
                "tests/builders/test_job_file_fields.py"]
API_TESTS = ["tests/api/test_spec_models.py", "tests/api/test_status_models.py",
             "tests/api/test_crd.py", "tests/builders/test_job_file_fields.py",
             "tests/api/test_slice_pattern.py"]
# Module -> the tests that cover it (pytest arguments, relative to the repository root).
MODULES: dict[str, list[str]] = {
    "trainer/tpujob_plan/catalog.py": PLAN_TESTS,
    "trainer/tpujob_plan/flops.py": PLAN_TESTS,
    "trainer/tpujob_plan/generations.py": PLAN_TESTS,
    "trainer/tpujob_plan/memory.py": ["tests/plan/test_memory_and_flops.py", "tests/plan/test_memory_request.py",
                                      "tests/plan/test_layers.py", "tests/plan/test_generations_facts.py"],
    "trainer/tpujob_plan/mesh.py": ["tests/plan/test_mesh.py"],
    "trainer/tpujob_plan/model_shape.py": ["tests/plan/test_memory_and_flops.py",
                                           "tests/plan/test_layers.py", "tests/plan/test_generations_facts.py"],
    "trainer/tpujob_plan/slice_plan.py": PLAN_TESTS,
    "trainer/tpujob_plan/topologies.py": PLAN_TESTS,
    "trainer/tpujob_plan/gpu_catalog.py": GPU_TESTS,
    "trainer/tpujob_plan/gpu_plan.py": GPU_TESTS,
    "trainer/tpujob_plan/hardware.py": GPU_TESTS,
    "trainer/tpujob_plan/zero_memory.py": GPU_TESTS,
    "operator/tpujob/builders/launchers.py": GPU_TESTS,
    "operator/tpujob/builders/gpu_network.py": GPU_TESTS,
    "operator/tpujob/cli/plan_render.py": GPU_TESTS + ["tests/plan/test_plan_cli.py"],
    "operator/tpujob/cli/plan_cmd.py": ["tests/plan/test_plan_output.py",
                                        "tests/plan/test_params_shorthand.py"],
    "operator/tpujob/controller/log_failures.py": ["tests/progress/test_gpu_log_formats_unit.py"],
    "operator/tpujob/builders/fingerprint.py": BUILDER_TESTS,
    "operator/tpujob/builders/jobset.py": BUILDER_TESTS,
    "operator/tpujob/builders/names.py": BUILDER_TESTS,
    "operator/tpujob/builders/trainer_config.py": BUILDER_TESTS,
    "operator/tpujob/builders/invocation.py": BUILDER_TESTS,
    "operator/tpujob/builders/wiring.py": BUILDER_TESTS + ["tests/executor/test_podenv_unit.py"],
    "operator/tpujob/builders/scheduling.py": ["tests/builders/test_scheduling.py"],
    "operator/tpujob/api/scheduling.py": ["tests/builders/test_scheduling.py"] + API_TESTS,
    "operator/tpujob/validation.py": VALIDATION_TESTS,
    "operator/tpujob/api/base.py": API_TESTS,
    "operator/tpujob/api/resource.py": API_TESTS,
    "operator/tpujob/api/status.py": API_TESTS + ["tests/controller/test_goodput.py",
                                                  "tests/controller/test_decide.py"],
    "operator/tpujob/api/crd.py": API_TESTS,
    "operator/tpujob/api/spec.py": API_TESTS,
    "operator/tpujob/api/patterns.py": API_TESTS,
    "operator/tpujob/api/parallelism.py": API_TESTS,
    "operator/tpujob/api/env_vars.py": API_TESTS,
    "operator/tpujob/api/trainer_spec.py": API_TESTS + ["tests/progress/test_log_source_unit.py"],
    "operator/tpujob/api/recovery.py": API_TESTS + ["tests/builders/test_restart_strategy.py",
                                                    "tests/builders/test_local_checkpoints.py"],
    "operator/tpujob/controller/goodput.py": ["tests/controller/test_goodput.py",
                                              "tests/controller/test_goodput_wiring.py",
                                              "tests/controller/test_trainer_contract.py"],
    "operator/tpujob/controller/trainer_reports.py": [
        "tests/controller/test_observe.py", "tests/controller/test_goodput_wiring.py",
        "tests/controller/test_goodput.py", "tests/controller/test_trainer_contract.py",
        "tests/controller/test_recovery.py", "tests/controller/test_trainer_reports.py"],
    # A restart's recovery broken down, through the operator's decision.
    "operator/tpujob/controller/recovery.py": ["tests/controller/test_recovery.py",
                                               "tests/controller/test_reconcile_recovery.py"],
    "trainer/tpujob_trainer/contract.py": ["tests/controller/test_trainer_contract.py",
                                           "tests/trainer/test_termination_message.py",
                                           "tests/trainer/test_contract.py",
                                           "tests/controller/test_observe.py",
                                           "tests/controller/test_host_reports.py",
                                           "tests/trainer/test_host_report.py"],
    "trainer/tpujob_trainer/telemetry/timeline.py": ["tests/controller/test_trainer_contract.py",
                                                     "tests/trainer/test_timeline.py"],
    "trainer/tpujob_trainer/telemetry/peak.py": ["tests/trainer/test_peak.py"],
    "trainer/tpujob_trainer/env.py": ["tests/trainer/test_contract.py",
                                      "tests/trainer/test_host_report.py",
                                      "tests/api/test_spec_models.py"],
    # Host reports: the trainer's lines and the operator's reader, each with the other's tests
    # (what one writes, the other reads back), then the pulse run through the real CLI.
    "trainer/tpujob_trainer/telemetry/host_report.py": ["tests/trainer/test_host_report.py",
                                                        "tests/controller/test_host_reports.py"],
    "operator/tpujob/controller/host_reports.py": ["tests/controller/test_host_reports.py"],
    "operator/tpujob/log_progress.py": ["tests/progress/test_log_progress_unit.py",
                                        "tests/progress/test_gpu_log_formats_unit.py",
                                        "tests/controller/test_host_reports.py"],
    "trainer/tpujob_trainer/cli.py": [
        "tests/trainer/test_cli.py::test_pulse_trains_a_few_steps_and_reports",
        "tests/trainer/test_lifeline.py::test_a_failed_collective_waits_for_the_account_that_"
        "names_the_lost_peer",
        "tests/trainer/test_cli.py"],
    "operator/tpujob/planning.py": ["tests/plan/test_params_shorthand.py",
                                    "tests/plan/test_memory_request.py",
                                    "tests/builders/test_job_file_fields.py",
                                    "tests/plan/test_layers.py", *GPU_TESTS],
    "operator/tpujob/local/session/run.py": ["tests/builders/test_job_file_fields.py"],
    "operator/tpujob/local/session/manifests.py": ["tests/builders/test_job_file_fields.py",
                                                   "tests/e2e/test_display_unit.py"],
    "operator/tpujob/controller/decide.py": ["tests/controller/test_decide.py",
                                             "tests/controller/test_decide_queue.py",
                                             "tests/controller/test_decide_status.py",
                                             "tests/controller/test_goodput_wiring.py",
                                             "tests/controller/test_recovery.py"],
    "operator/tpujob/controller/decision.py": ["tests/controller/test_decide.py",
                                               "tests/controller/test_decide_status.py",
                                               "tests/controller/test_reconcile_paths.py"],
    "operator/tpujob/controller/kueue_workload.py": ["tests/controller/test_kueue_workload.py",
                                                     "tests/controller/test_decide_queue.py"],
    "operator/tpujob/controller/queueing.py": ["tests/controller/test_decide_queue.py"],
    "operator/tpujob/controller/progress_status.py": ["tests/controller/test_decide.py",
                                                      "tests/controller/test_decide_status.py",
                                                      "tests/controller/test_goodput_wiring.py"],
    "operator/tpujob/controller/observe.py": ["tests/controller/test_observe.py",
                                              "tests/controller/test_trainer_endpoints.py",
                                              "tests/controller/test_reconcile_hosts.py",
                                              "tests/controller/test_decide_queue.py",
                                              "tests/controller/test_goodput_wiring.py",
                                              "tests/controller/test_trainer_contract.py",
                                              "tests/controller/test_recovery.py",
                                              "tests/progress/test_gpu_log_formats_unit.py"],
    "operator/tpujob/controller/reconcile.py": ["tests/controller/test_reconcile_paths.py",
                                                "tests/controller/test_verdict_cache.py",
                                                "tests/controller/test_reconcile_hosts.py",
                                                "tests/controller/test_reconcile_recovery.py"],
    "operator/tpujob/local/session/display.py": ["tests/e2e/test_display_unit.py"],
    "operator/tpujob/controller/log_source.py": [
        "tests/progress/test_log_source_unit.py",
        "tests/controller/test_reconcile_paths.py::test_the_log_is_read_through_the_reader_given"],
    "operator/tpujob/controller/kube.py": ["tests/controller/test_kube_api.py"],
    "operator/tpujob/controller/stragglers.py": ["tests/controller/test_stragglers.py",
                                                 "tests/controller/test_hangs.py"],
    "operator/tpujob/controller/hangs.py": ["tests/controller/test_hangs.py",
                                            "tests/controller/test_host_watch.py",
                                            "tests/controller/test_stall.py",
                                            "tests/controller/test_decide.py"],
    # A stall: what to do (restart budget, the hosts behind), every process's stacks first.
    "operator/tpujob/controller/stall.py": ["tests/controller/test_stall.py",
                                            "tests/controller/test_decide.py"],
    "operator/tpujob/controller/progress.py": ["tests/controller/test_fetch_stacks.py",
                                               "tests/controller/test_reconcile_paths.py"],
    "trainer/tpujob_trainer/telemetry/stacks.py": ["tests/trainer/test_stacks.py",
                                                   "tests/controller/test_fetch_stacks.py"],
    "trainer/tpujob_trainer/telemetry/server.py": ["tests/trainer/test_progress_metrics.py",
                                                   "tests/controller/test_trainer_contract.py",
                                                   "tests/trainer/test_stacks.py",
                                                   "tests/trainer/test_http.py"],
    # Slow hosts in status: the reads gathered, the status decided, through the reconciler.
    "operator/tpujob/controller/host_watch.py": ["tests/controller/test_host_watch.py",
                                                 "tests/controller/test_stall.py",
                                                 "tests/controller/test_reconcile_hosts.py"],
    "operator/tpujob/controller/host_status.py": ["tests/controller/test_host_watch.py",
                                                  "tests/controller/test_decide.py",
                                                  "tests/controller/test_reconcile_hosts.py"],
    "trainer/tpujob_trainer/telemetry/fault.py": ["tests/trainer/test_step_fault.py",
                                                  "tests/trainer/test_host_report.py"],
    "operator/tpujob/controller/settings.py": ["tests/controller/test_webhook_cert.py",
                                               "tests/controller/test_reconcile_paths.py"],
    "operator/tpujob/controller/operator.py": ["tests/controller/test_webhook_cert.py",
                                               "tests/controller/test_relist.py"],
    "trainer/tpujob_trainer/exits.py": ["tests/trainer/test_termination_message.py",
                                        "tests/trainer/test_contract.py",
                                        "tests/controller/test_observe.py"],
    "operator/tpujob/local/apiserver/patch.py": ["tests/apiserver/test_patch_unit.py"],
    "operator/tpujob/local/apiserver/strategic.py": ["tests/apiserver/test_strategic_unit.py"],
    "operator/tpujob/local/apiserver/errors.py": ["tests/apiserver/test_answers_unit.py",
                                                  "tests/apiserver/test_strategy_unit.py"],
    "operator/tpujob/local/apiserver/watch.py": ["tests/apiserver/test_answers_unit.py",
                                                 "tests/apiserver/test_watch.py", "-k", "not real"],
    **{f"operator/tpujob/local/apiserver/{name}.py": ["tests/apiserver/test_answers_unit.py",
                                                      "tests/apiserver/test_table_unit.py"]
       for name in ("table", "printers")},
    **{f"operator/tpujob/local/apiserver/{name}.py": [
        "tests/apiserver/test_answers_unit.py", "tests/apiserver/test_reads_unit.py",
        "tests/apiserver/test_crud.py",
        "tests/apiserver/test_deletion.py", "tests/apiserver/test_bad_requests.py",
        "tests/apiserver/test_custom_resources.py", "-k", "not real"]
       for name in ("server", "codec", "reads", "writes", "deletes")},
    "operator/tpujob/local/apiserver/observe.py": ["tests/apiserver/test_request_log.py",
                                                   "tests/apiserver/test_faults.py"],
    "operator/tpujob/local/apiserver/podlogs.py": ["tests/apiserver/test_podlogs_unit.py"],
    "operator/tpujob/local/containerlog.py": ["tests/executor/test_containerlog_unit.py",
                                             "tests/apiserver/test_podlogs_unit.py"],
    "operator/tpujob/local/apiserver/schema.py": ["tests/apiserver/test_schema_unit.py"],
    "operator/tpujob/local/cache.py": ["tests/controlplane/test_build_unit.py"],
    "operator/tpujob/local/executor/nodes.py": ["tests/executor/test_nodes_unit.py"],
    "operator/tpujob/local/executor/provisioner.py": ["tests/executor/test_provisioner_unit.py"],
    "operator/tpujob/local/executor/leftovers.py": ["tests/executor/test_leftovers_unit.py"],
    "trainer/tpujob_trainer/optim.py": ["tests/trainer/test_optim.py"],
    "operator/tpujob/gcp/workload_policy.py": ["tests/gcp/test_workload_policy_unit.py",
                                              "tests/gcp/test_compute_api_unit.py",
                                              "tests/gcp/test_ensure.py",
                                              "tests/operator/test_webhook_and_policies.py"],
    "operator/tpujob/controller/admission.py": VALIDATION_TESTS,
    "operator/tpujob/maxtext_args.py": ["tests/builders/test_foreign_preflight.py"],
    "trainer/tpujob_trainer/lifeline.py": ["tests/trainer/test_lifeline.py"],
    "trainer/tpujob_trainer/distributed.py": ["tests/trainer/test_distributed_unit.py",
                                              "tests/trainer/test_lifeline.py",
                                              "tests/trainer/test_faults.py",
                                              "tests/trainer/test_multidevice.py", "-k",
                                              "unit or lifeline or coordinator or killed or whole_job"],
    **{f"trainer/tpujob_trainer/data/{name}.py": ["tests/trainer_io/test_data.py",
                                                  "tests/trainer_io/test_sources_unit.py"]
       for name in ("sources", "files", "tokenizer")},
    **{f"operator/tpujob/local/executor/{name}.py": ["tests/executor/test_policies_unit.py"]
       for name in ("failure_policy", "jobset_children", "jobset_status", "jobset_controller")},
    "operator/tpujob/local/executor/container_env.py": ["tests/executor/test_podenv_unit.py"],
    "trainer/tpujob_trainer/mesh.py": ["tests/trainer/test_contract.py"],
    "operator/tpujob/local/executor/keys.py": ["tests/executor/test_policies_unit.py"],
    # The fast table first; the kubelet's own fields (next start, termination-log path, gone)
    # are read only by the kubelet, which needs an API server.
    "operator/tpujob/local/executor/pod_status.py": ["tests/executor/test_pod_status_unit.py",
                                                     "tests/executor/test_kubelet.py"],
    "operator/tpujob/local/executor/in_place_restart.py": [
        "tests/executor/test_pod_status_unit.py", "tests/executor/test_policies_unit.py"],
    # The kubelet's and the executor's effects need an API server: a few seconds a run.
    **{f"operator/tpujob/local/executor/{name}.py": ["tests/executor/test_podenv_unit.py",
                                                     "tests/executor/test_kubelet.py"]
       for name in ("kubelet", "executor")},
    "operator/tpujob/local/controlplane/build.py": ["tests/controlplane/test_build_unit.py"],
    "operator/tpujob/local/controlplane/components.py": [
        "tests/controlplane/test_components_unit.py"],
    "operator/tpujob/local/controlplane/kueue_setup.py": [
        "tests/controlplane/test_kueue_setup_unit.py"],
    # Only the wait for a served resource has a fast test; the rest starts real binaries
    # (tests/faults, tests/e2e on the real plane).
    "operator/tpujob/local/controlplane/cluster.py": ["tests/controlplane/test_served_unit.py"],
    "operator/tpujob/local/apiserver/selectors.py": ["tests/apiserver/test_selectors_unit.py",
                                                     "tests/apiserver/test_answers_unit.py"],
    "operator/tpujob/local/apiserver/resources.py": ["tests/apiserver/test_answers_unit.py",
                                                     "tests/apiserver/test_strategy_unit.py"],
    "operator/tpujob/local/apiserver/store.py": ["tests/apiserver/test_store_unit.py"],
    "operator/tpujob/local/apiserver/strategy.py": ["tests/apiserver/test_strategy_unit.py",
                                                    "tests/apiserver/test_store_unit.py"],
    **{f"trainer/tpujob_trainer/config/{name}.py": CONFIG_TESTS for name in (
        "root", "train", "model", "optimizer", "mesh", "data", "checkpoint", "metrics",
        "compile_cache", "keys")},
    # The attention kernel's refusals are caught on the user's path: validate_job.
    "trainer/tpujob_trainer/config/model.py": [*CONFIG_TESTS, "tests/builders/test_validation.py",
                                               "tests/builders/test_gpu_jobs.py"],
    "operator/tpujob/local/session/gcs.py": ["tests/e2e/test_gcs_emulator.py"],
    "operator/tpujob/local/compute_api.py": ["tests/gcp/test_compute_api_unit.py",
                                             "tests/gcp/test_compute_client.py"],
    "operator/tpujob/local/compute_standin.py": ["tests/gcp/test_compute_client.py",
                                                 "tests/gcp/test_ensure.py"],
    # The pure halves first, then two processes agreeing through JAX, then the checkpoints.
    "trainer/tpujob_trainer/checkpoint/collectives.py": [
        "tests/trainer/test_checkpoint_collectives.py"],
    "trainer/tpujob_trainer/checkpoint/errors.py": ["tests/trainer/test_loop_steps.py"],
    "trainer/tpujob_trainer/checkpoint/steps.py": [
        "tests/trainer/test_local_checkpoints.py", "tests/trainer_io/test_checkpoint.py"],
    "trainer/tpujob_trainer/checkpoint/checkpointer.py": [
        "tests/trainer/test_checkpoint_collectives.py", "tests/trainer_io/test_checkpoint.py"],
    "trainer/tpujob_trainer/checkpoint/tiered.py": [
        "tests/trainer/test_checkpoint_collectives.py", "tests/trainer/test_local_checkpoints.py"],
    # The node-local tier in one process: its save, layout, writer and load.
    "trainer/tpujob_trainer/checkpoint/local.py": [
        *(f"tests/trainer/test_local_checkpoints.py::{name}" for name in (
            "test_a_saved_step_loads_back_bit_for_bit_with_its_data_position",
            "test_a_local_save_is_due_every_n_steps_after_the_first",
            "test_a_failed_write_is_logged_once_and_the_next_save_writes",
            "test_each_save_writes_its_own_states_values_and_layout",
            "test_keep_prunes_old_steps_and_a_save_drops_newer_ones_from_an_abandoned_timeline",
            "test_a_manifest_from_another_run_process_or_timeline_is_not_used",
            "test_damaged_bytes_are_refused_on_load",
            "test_a_different_layout_is_refused_on_load"))],
    # Its key here; its load and save run in tests/trainer/test_compile_cache.py (whole
    # trainer starts: minutes a mutant).
    "trainer/tpujob_trainer/executable_cache.py": ["tests/trainer/test_executable_key.py"],
    # The CPU's flags and whether it multiplies bf16 natively; the matmul form they pick is
    # checked where it is used (layers.py's row).
    "trainer/tpujob_trainer/cpu.py": ["tests/trainer/test_cpu.py"],
    # Compiling for a TPU: the pure parts and the kernel choice first, then the real compiler.
    "trainer/tpujob_trainer/models/attention.py": ["tests/trainer/test_attention.py",
                                                   "tests/trainer/test_aot.py"],
    "trainer/tpujob_trainer/models/layers.py": ["tests/trainer/test_attention.py",
                                                "tests/trainer/test_mixed_dot.py",
                                                "tests/trainer/test_model.py",
                                                "tests/trainer/test_output_loss.py::test_the_mlp_"
                                                "on_a_tpu_target_is_the_stacked_one",
                                                "tests/trainer/test_output_loss.py::test_the_mlp_"
                                                "on_a_tpu_target_keeps_only_gate_and_up_for_its_"
                                                "backward",
                                                "tests/trainer/test_mlp_chunked.py::test_on_a_tpu_"
                                                "target_under_remat_full_the_models_mlp_is_"
                                                "chunked_and_the_same",
                                                "tests/trainer/test_mlp_chunked.py::test_on_a_gpu_"
                                                "target_the_mlp_is_two_matmuls_never_chunked_"
                                                "and_the_same",
                                                "tests/trainer/test_moe_routing.py"],
    "trainer/tpujob_trainer/sharding.py": ["tests/trainer/test_model.py::test_shapes_and_dtypes",
                                           "tests/trainer/test_optimizer_sharding.py",
                                           "tests/trainer/test_attention.py",
                                           "tests/trainer/test_aot.py",
                                           "tests/trainer/test_output_loss.py::test_auto_chunks_"
                                           "follow_the_generation_compiled_for",
                                           "tests/trainer/test_mlp_chunked.py::test_auto_chunks_"
                                           "count_what_one_device_holds_on_the_mesh_compiled_for"],
    "trainer/tpujob_trainer/aot.py": ["tests/trainer/test_aot_cache.py",
                                      "tests/trainer/test_aot.py"],
    "trainer/tpujob_trainer/aot_cache.py": ["tests/trainer/test_aot_cache.py"],
    "trainer/tpujob_trainer/step.py": ["tests/trainer/test_optimizer_sharding.py",
                                       "tests/trainer/test_loss.py", "tests/trainer/test_model.py",
                                       "tests/trainer/test_output_loss.py"],
    "trainer/tpujob_trainer/config/mesh.py": ["tests/trainer/test_config_fields.py",
                                              "tests/trainer/test_optimizer_sharding.py"],
    # The output layer by vocabulary chunks: the count (also the HBM estimate's), the chunked
    # loss and its gradients, and the model's loss taking it (the compile test last: slowest).
    "trainer/tpujob_plan/vocab_chunks.py": [
        "tests/trainer/test_output_loss.py::test_vocab_chunks",
        "tests/trainer/test_output_loss.py::test_chunk_bounds_cover_the_vocabulary_in_lane_widths",
        "tests/plan/test_memory_and_flops.py"],
    # A dense MLP's backward by chunks of its hidden width: the count (also the HBM estimate's, through
    # the request the operator uses), the chunked MLP's value and gradients, and the model
    # taking it (the compile test, over the per-mutant timeout, runs in the suite only).
    "trainer/tpujob_plan/mlp_chunks.py": [
        "tests/trainer/test_mlp_chunked.py::test_mlp_chunks",
        "tests/trainer/test_mlp_chunked.py::test_no_mlp_chunks_where_data_splits_the_batch",
        "tests/plan/test_memory_and_flops.py"],
    "trainer/tpujob_trainer/models/mlp_chunked.py": [
        "tests/trainer/test_mlp_chunked.py::test_chunked_mlp_value_and_gradients_are_the_plain_ones",
        "tests/trainer/test_mlp_chunked.py::test_in_bf16_the_chunked_gradients_are_as_close_to_"
        "float32_as_the_plain_ones",
        "tests/trainer/test_mlp_chunked.py::test_in_bf16_the_input_gradient_is_summed_over_chunks_"
        "in_float32",
        "tests/trainer/test_mlp_chunked.py::test_on_a_tpu_target_under_remat_full_the_models_mlp_"
        "is_chunked_and_the_same",
        "tests/trainer/test_mlp_chunked.py::test_auto_chunks_count_what_one_device_holds_on_the_"
        "mesh_compiled_for"],
    "trainer/tpujob_trainer/models/output_loss.py": [
        "tests/trainer/test_output_loss.py::test_chunked_loss_and_gradients_are_the_plain_ones",
        "tests/trainer/test_output_loss.py::test_auto_chunks_follow_the_generation_compiled_for",
        "tests/trainer/test_output_loss.py::test_on_a_tpu_target_the_models_loss_is_chunked_and_"
        "the_same", "tests/trainer/test_output_loss.py::test_compiled_for_a_tpu_the_step_holds_"
        "one_chunk_of_the_logits"],
    "trainer/tpujob_trainer/models/decoder.py": ["tests/trainer/test_model.py",
                                                 "tests/trainer/test_output_loss.py"],
    "trainer/tpujob_trainer/models/moe.py": ["tests/trainer/test_model.py",
                                             "tests/trainer/test_moe_routing.py"],
    "trainer/tpujob_trainer/models/moe_dropless.py": ["tests/trainer/test_moe_routing.py"],
    "operator/tpujob/cli/plan_compile.py": ["tests/plan/test_plan_compile.py"],
    "operator/tpujob/cli/local_cmd.py": [
        "tests/e2e/test_cli_up.py::test_a_port_with_the_real_control_plane_is_refused_before_"
        "anything_starts", "tests/e2e/test_cli_up.py::test_a_port_in_use_is_reported_and_nothing_"
        "stays_up"],
    "trainer/tpujob_trainer/remat.py": ["tests/plan/test_memory_request.py"],
    # The fast fakes first (-x: a mutant they kill costs no training), then real training.
    "trainer/tpujob_trainer/step_compile.py": ["tests/trainer/test_step_compile.py"],
    "trainer/tpujob_trainer/step_share.py": ["tests/trainer/test_step_share.py"],
    "trainer/tpujob_trainer/compile_cache.py": ["tests/trainer/test_step_compile.py"],
    "trainer/tpujob_trainer/loop.py": ["tests/trainer/test_loop_steps.py",
                                       "tests/trainer/test_host_report.py",
                                       "tests/trainer/test_loss_check.py",
                                       "tests/trainer/test_loop_train.py"],
}
# Survivors judged equivalent (no test can tell them from the original), with why: (module,
# the source line as written, the mutation) -> reason. The report counts them apart.
EQUIVALENT: dict[tuple[str, str, str], str] = {
    ("trainer/tpujob_trainer/distributed.py", "_stopping.wait(1.0)", "1.0 -> 2.0"):
        "the pause before reading the news again after a read failed (a timeout, the service "
        "going away): a stop ends it at once",
    ("trainer/tpujob_trainer/distributed.py",
     "with socket.create_connection((host.strip(\"[]\"), int(port)), timeout=2):", "2 -> 3"):
        "a bound on the probe's connect, which is answered or refused at once where anything "
        "is reachable",
    ("trainer/tpujob_trainer/distributed.py",
     "client.key_value_set(_NEWS_KEY.format(jax.process_index()), _DONE, allow_overwrite=True)",
     "True -> False"):
        "`done` only has to release a watcher blocked on an empty key; where a peer's news is "
        "already there the watcher has read it and returns on `_stopping`, set first",
    ("trainer/tpujob_trainer/distributed.py",
     'print(f"tpujob-train: {reason.value}: {message}", file=sys.stderr, flush=True)',
     "True -> False"):
        "stderr is line-buffered (Python 3.9 and later, interactive or not) and the line ends "
        "in a newline: it is written either way",
    ("trainer/tpujob_trainer/distributed.py", "def stop_watching(timeout_s: float = 10.0) -> None:",
     "10.0 -> 15.0"):
        "a bound on joining the watcher, which `done` releases at once",
    ("trainer/tpujob_trainer/distributed.py", "_JAX_TIMEOUT_MARGIN_S = 30", "30 -> 31"):
        "a margin: the watchdog fires at the job's own timeout, long before JAX's, either way",
    ("trainer/tpujob_trainer/distributed.py", "_WATCH_INTERVAL_MS = 60_000", "60000 -> 60001"):
        "how long one blocking read of the news waits before the watcher reads again: news "
        "ends the read at once whatever its bound",
    ("trainer/tpujob_trainer/distributed.py", "PEER_ACCOUNT_WAIT_S = 5.0", "5.0 -> 7.5"):
        "a bound on waiting for the lifeline's account, which comes in milliseconds when it comes",
    ("trainer/tpujob_trainer/distributed.py", "watchdog.daemon = True", "True -> False"):
        "the watchdog is cancelled in `initialize`'s finally, before the process can end",
    **{("trainer/tpujob_trainer/data/sources.py",
        "np.uint32 if self.windows < 2**32 else np.int64)", change):
       "the permutation's integer type, not its values: windows index the same tokens either "
       "way (`< -> <=`: 2**32 windows hold 0 .. 2**32 - 1, which uint32 holds too)"
       for change in ("< -> <=", "** -> *", "2 -> 3", "32 -> 33")},
    **{("trainer/tpujob_trainer/data/sources.py",
        "self.windows = (len(stream) - 1) // self.seq_len if len(stream) > 1 else 0", change):
       "a stream of one token: (1 - 1) // seq_len is 0 windows either way"
       for change in ("> -> >=", "1 -> 0")},
    ("trainer/tpujob_trainer/lifeline.py", "line._peers[conn] = 0", "0 -> 1"):
        "a follower's only peer is process 0, which `_follow` names itself; the value is not read",
    **{("trainer/tpujob_trainer/lifeline.py", line, "256 -> 257"):
       "a read's size: lines are split out of what has been read, whatever its size"
       for line in ("data = sock.recv(256)", "data = conn.recv(256)")},
    ("trainer/tpujob_trainer/lifeline.py", "timeout_s: float = 60.0) -> Lifeline | None:",
     "60.0 -> 90.0"):
        "a bound on waiting for process 0's port, which is there once the job has assembled; "
        "the tests see the wait end, not its minute",
    ("operator/tpujob/gcp/workload_policy.py", "operation_timeout_s: float = 300.0) -> WorkloadPolicyResult:",
     "300.0 -> 450.0"):
        "a default no product caller takes (both pass WorkloadPolicySettings.operation_timeout_s); "
        "the tests' fake operations are done at once",
    ("operator/tpujob/maxtext_args.py", "@dataclass(frozen=True)", "True -> False"):
        "nothing assigns to a reading after `read_maxtext_settings` makes it",
    ("operator/tpujob/gcp/workload_policy.py", "@dataclass(frozen=True)", "True -> False"):
        "nothing assigns to a policy's spec or result after they are made, nor hashes them",
    ("trainer/tpujob_trainer/optim.py",
     "[optax.linear_schedule(0.0, peak, max(warmup, 1)), optax.constant_schedule(peak)],",
     "1 -> 0"):
        "the linear piece is used only before step `warmup`: with no warmup the join at step 0 "
        "never reaches it (a ramp of 0 steps would only make optax warn)",
    ("operator/tpujob/planning.py", "@dataclass(frozen=True)", "True -> False"):
        "nothing assigns to, hashes or compares these requests and results after they are made",
    **{("operator/tpujob/planning.py", line, change):
       "a default every caller gives (PlanRequest.from_cli, plan_one)"
       for line, change in (("grad_accum: int = 1", "1 -> 0"),
                            ("capacity_factor: float = 1.25", "1.25 -> 1.875"),
                            ("slices: int = 1", "1 -> 0"),
                            ("mesh_requested: bool = False", "False -> True"))},
    ("operator/tpujob/planning.py",
     "assert self.plan is not None and self.model is not None", "and -> or"):
        "an assertion of what its one caller (to_dict, under `memory is not None and model is "
        "not None` of a planned slice) guarantees",
    **{("operator/tpujob/planning.py", "for d in range(128, 65536 + 1, 128):", change):
       "the loop ends past the count asked, which is at most 10T: width 46208"
       for change in ("+ -> -", "1 -> 0", "65536 -> 65537")},
    ("operator/tpujob/planning.py", "heads = max(1, d // 128)", "1 -> 0"):
        "every width is at least 128, so d // 128 is at least 1",
    ("operator/tpujob/planning.py",
     "n_kv_heads=max(1, heads // 4) if heads >= 4 else heads,", "1 -> 0"):
        "taken only where heads >= 4, so heads // 4 is at least 1",
    ("operator/tpujob/planning.py", "if shape.total_params > target:", "> -> >="):
        "a width whose count is the target exactly is the nearest: stopping there or one width "
        "later chooses the same",
    ("operator/tpujob/local/executor/leftovers.py", "ROUNDS = 5", "5 -> 6"):
        "a bound on kill rounds for processes started while others are killed: one more round "
        "finds nothing more where the first found all",
    **{("operator/tpujob/local/containerlog.py", "CHUNK = 64 * 1024", change):
       "the size of one read from a container's pipe: any size copies the same bytes"
       for change in ("64 -> 65", "1024 -> 1025")},
    **{("operator/tpujob/local/containerlog.py", "MAX_LINE = 16 * 1024", change):
       "where a line too long to hold is cut: the tests cut at MAX_LINE, whatever its value "
       "(16 KiB is the kubelet's and containerd's)"
       for change in ("16 -> 17", "1024 -> 1025")},
    ("trainer/tpujob_trainer/sharding.py",
     "return _active_mesh.shape.get(name, 1) if _active_mesh is not None else 1", "1 -> 0"):
        "an axis of size 0 or 1 splits nothing alike to its callers, which ask `> 1` (and the "
        "trainer's meshes name all five axes, so the default is not read)",
    ("trainer/tpujob_plan/mlp_chunks.py", 'remat: str = "full", data: int = 1) -> int:',
     "1 -> 0"):
        "a `data` of 0 or 1 both leave the batch unsplit: the rule asks `data > 1`",
    ("trainer/tpujob_trainer/models/moe_dropless.py", "TILE = 512", "512 -> 513"):
        "the grouped matmul's tile is a speed choice: any tile gives the same product",
    ("trainer/tpujob_trainer/models/moe_dropless.py", "interpret: bool = False) -> jax.Array:",
     "False -> True"):
        "Pallas's interpreter computes what the compiled kernel does (compiled for a TPU, the "
        "step would be slow, not wrong)",
    ("trainer/tpujob_trainer/models/moe_dropless.py",
     "order_R = jnp.argsort(expert_R, stable=True)           # rows grouped by expert",
     "True -> False"):
        "the order of one expert's rows does not matter: they go back by the inverse permutation",
    ("trainer/tpujob_trainer/models/moe_dropless.py", "if mesh is None or mesh.size == 1:",
     "1 -> 0"):
        "a one-device mesh through the shard_map computes the same layer",
    ("trainer/tpujob_trainer/models/moe_dropless.py",
     "tiling = (math.gcd(M, TILE), min(K, TILE), min(w_GxKxN.shape[-1], TILE))", "1 -> 0"):
        "the grouped matmul's tile is a speed choice: any tile gives the same product",
    ("trainer/tpujob_trainer/models/moe_dropless.py",
     "axes = tuple(a for a in LOGICAL_RULES[logical] if shape.get(a, 1) > 1)", "> -> >="):
        "a split over mesh axes of size 1 is no split: the same per-device work",
    ("trainer/tpujob_trainer/models/moe_dropless.py",
     "axes = tuple(a for a in LOGICAL_RULES[logical] if shape.get(a, 1) > 1)", "1 -> 0"):
        "every mesh axis is in the mesh's shape, and axes of size 1 split nothing",
    ("trainer/tpujob_trainer/checkpoint/local.py",
     "if self._kept is None or self._kept[0] != made_for:", "0 -> 1"):
        "the layout is then worked out again at every save: the same manifest, only slower "
        "(benchmarks/local_save.py is what sees it)",
    ("trainer/tpujob_trainer/checkpoint/local.py",
     "self._writer = threading.Thread(target=self._write_queued, daemon=True,", "True -> False"):
        "the trainer closes the tier (TieredCheckpointer.close, in the loop's finally), which "
        "ends the writer before the interpreter waits for non-daemon threads",
    ("trainer/tpujob_trainer/compile_cache.py",
     'jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)', "1 -> 0"):
        "a minimum of 0 bytes or -1 keeps every entry alike: no compiled program is empty",
    ("trainer/tpujob_plan/zero_memory.py",
     "for other in STAGES[stage + 1:]:   # the next stage that fits", "1 -> 0"):
        "the job's own stage is tried first and never fits (that is why the loop runs)",
    ("trainer/tpujob_trainer/telemetry/server.py", "daemon_threads = True", "True -> False"):
        "a request still being answered would hold the process's exit until it is answered; "
        "every request the operator makes is answered in milliseconds",
    ("trainer/tpujob_trainer/telemetry/server.py", "daemon=True)", "True -> False"):
        "the loop closes the server before the process ends (shutdown stops serve_forever), so "
        "the thread is gone before the interpreter waits for non-daemon threads",
    ("trainer/tpujob_trainer/telemetry/stacks.py",
     'name="tpujob-stacks-save", daemon=True)', "True -> False"):
        "a save still running would hold the process's exit until it ends; nothing a test "
        "sees before then differs",
    ("operator/tpujob/controller/host_watch.py",
     "if samples and (self.first_step is None or samples[0].step < self.first_step):",
     "< -> <="): "an equal step sets first_step to the value it has",
    ("operator/tpujob/local/executor/in_place_restart.py", "@dataclass(frozen=True)",
     "True -> False"): "nothing assigns to a verdict after it is made",
    ("trainer/tpujob_trainer/telemetry/host_report.py", "self._thread.join(timeout=5)",
     "5 -> 6"): "the thread ends as soon as close sets the event; the bound only matters while "
                "a write blocks on a full pipe, and then a second more is the same",
    ("operator/tpujob/builders/fingerprint.py",
     'return json.dumps(build_fingerprint(spec), sort_keys=True, separators=(",", ":"))',
     "True -> False"): "build_fingerprint already returns its keys sorted",
    ("operator/tpujob/builders/trainer_config.py",
     '"data": {CONFIG_FILE: yaml.safe_dump(config, sort_keys=False)},',
     "False -> True"): "the same mapping with its keys in another order; the trainer reads a "
                       "mapping",
    ("trainer/tpujob_plan/topologies.py", "_MAX_DIM = 256", "256 -> 257"):
        "range(4, _MAX_DIM + 1, 4) yields the same multiples of 4 up to 256 either way",
    ("trainer/tpujob_plan/topologies.py",
     "max_cubes: int = 0                     # 3-D: the largest slice, in 4x4x4 cubes",
     "0 -> 1"): "only 2-D rules keep the default, and they use `fixed`, never max_cubes",
    ("trainer/tpujob_plan/topologies.py",
     "has_curated_default: Callable[[int], bool] = lambda chips: True", "True -> False"):
        "only the 2-D rules keep the default, and each of their chip counts has one topology, "
        "so the first and the most balanced are the same",
    ("trainer/tpujob_plan/topologies.py",
     "has_curated_default=lambda c: c <= 128 or c in {256, 512, 768, 1024, 2048}),",
     "<= -> <"): "v4's three 128-chip topologies tie on balance, and a tie keeps the first",
    ("trainer/tpujob_plan/topologies.py",
     "has_curated_default=lambda c: c <= 128 or c in {256, 512, 768, 1024, 2048}),",
     "128 -> 129"): "no v4 topology has 129 chips",
    ("trainer/tpujob_plan/topologies.py",
     "\"v5p\": TopologyRule(max_cubes=140, has_curated_default=lambda c: c <= 6144 or c in "
     "{6912, 8960}),", "6144 -> 6145"): "no v5p topology has 6145 chips",
    ("trainer/tpujob_plan/topologies.py",
     "has_curated_default=lambda c: c <= 6144 or c in {6912, 8192, 8960, 9216}),",
     "6144 -> 6145"): "no tpu7x topology has 6145 chips",
    ("trainer/tpujob_plan/vocab_chunks.py",
     "vocab_split: int = 1, data: int = 1, generation: str | None = None) -> int:",
     "1 -> 0"): "a default of 0 is no split either: only a split over 1 turns chunks off",
    ("trainer/tpujob_plan/vocab_chunks.py", "if chunks <= 1:", "<= -> <"):
        "for one chunk the lane-rounded width covers the vocabulary: the same single chunk",
    ("trainer/tpujob_plan/vocab_chunks.py", "if chunks <= 1:", "1 -> 0"):
        "for one chunk the lane-rounded width covers the vocabulary: the same single chunk",
    ("trainer/tpujob_plan/flops.py", "moe_ffn = 0.0", "0.0 -> 1"):
        "a dense shape has no MoE layer, so moe_ffn is multiplied by 0; a MoE one reassigns it",
    ("trainer/tpujob_plan/memory.py",
     'compute_bytes: int = 2, optimizer: str = "adamw", grad_accum: int = 1,', "1 -> 0"):
        "grad_accum is only read through max(grad_accum, 1) and grad_accum > 1",
    ("trainer/tpujob_plan/memory.py",
     '+ breakdown.get("castWeights", 0.0) + breakdown["params"])', "0.0 -> 1"):
        "one byte added to the layer backward where no weights are cast (compute dtype = "
        "param dtype): the same verdict to the byte",
    ("trainer/tpujob_plan/memory.py", "grad_accum: int = 1", "1 -> 0"):
        "the request's grad_accum reaches the estimate, which reads it only through "
        "max(grad_accum, 1) and grad_accum > 1",
    ("trainer/tpujob_plan/memory.py",
     "shape.dense_mlp_params if shape.n_dense_layers else 0,", "0 -> 1"):
        "only the max with the MoE layer's parameters is taken, which are far above 1",
    ("trainer/tpujob_plan/memory.py",
     "shape.moe_mlp_params / expert if shape.n_moe_layers else 0)", "0 -> 1"):
        "only the max with the dense layer's parameters is taken, which are far above 1",
    ("trainer/tpujob_plan/mesh.py",
     "return devices % 8 == 0 and devices <= 32 and physical[0] <= 2 and physical[1] <= 2",
     "0 -> 1"):
        "every tpu7x slice of at most 32 devices has x = y (2x2, or 1x1 with 2 devices), so "
        "checking x twice or y twice is the same",
    ("trainer/tpujob_plan/mesh.py",
     "return devices % 8 == 0 and devices <= 32 and physical[0] <= 2 and physical[1] <= 2",
     "1 -> 0"):
        "every tpu7x slice of at most 32 devices has x = y (2x2, or 1x1 with 2 devices), so "
        "checking x twice or y twice is the same",
    ("trainer/tpujob_plan/mesh.py",
     "return devices % 8 == 0 and devices <= 32 and physical[0] <= 2 and physical[1] <= 2",
     "2 -> 3"):
        "no TPU topology has a dimension of 3 (they are 1, 2 or multiples of 4)",
    ("trainer/tpujob_plan/mesh.py",
     "return devices % 8 == 0 and devices <= 32 and physical[0] <= 2 and physical[1] <= 2",
     "32 -> 33"):
        "devices is a multiple of 8 here: none lies between 32 and 33",
    ("trainer/tpujob_plan/mesh.py",
     "if z == 1 and (x, y) in {(2, 2), (2, 4)}:       # v5e / v6e 2x2 and 2x4", "2 -> 3"):
        "the 2x2 rule is redundant: on a 2x2 torus any layout of 4 devices (4, or 2 and 2) is "
        "placed by the assignment too; and no topology is 3x2 or 2x3 (test_mesh checks every "
        "layout against JAX)",
    ("trainer/tpujob_plan/mesh.py",
     "if z == 1 and (x, y) == (4, 4):                  # v5e / v6e 4x4, one 16-way axis", "1 -> 0"):
        "the 4x4 rule is redundant: the one layout it accepts (an axis of 16) the assignment "
        "places on 4x4 too, and for any other it answers no and the assignment decides "
        "(test_mesh checks every layout against JAX)",
    ("trainer/tpujob_plan/mesh.py",
     "if z == 1 and (x, y) == (4, 4):                  # v5e / v6e 4x4, one 16-way axis", "4 -> 5"):
        "the 4x4 rule is redundant (see 1 -> 0 on this line), and no topology is 5x4 or 4x5",
    ("trainer/tpujob_plan/mesh.py",
     "return max(ici.values()) == 16", "16 -> 17"):
        "the 4x4 rule is redundant: with it never true, the assignment places the axis of 16 on "
        "4x4 all the same",
    ("trainer/tpujob_plan/mesh.py",
     "return (x, y, z) == (2, 2, 2)                    # v5p 2x2x2", "2 -> 3"):
        "the 2x2x2 rule is redundant: any layout of 8 devices (8, 4 and 2, or three 2s) is "
        "placed on 2x2x2 by the assignment too; and no topology has a dimension of 3",
    ("trainer/tpujob_plan/mesh.py",
     'named = [a for a in MESH_AXES if ici.get(a, 1) > 1] or ["fsdp"]', "1 -> 0"):
        "the default of ici.get: a missing axis is not > 1 whether read as 1 or 0 (the other "
        "1 -> 0 of this line, `> 0`, is pinned)",
    ("trainer/tpujob_plan/mesh.py",
     "layout = {a: 1 for a in MESH_AXES} | dict(zip(named, sizes, strict=True))", "True -> False"):
        "named and each factorization have the same length by construction",
    ("trainer/tpujob_plan/mesh.py",
     'model = [a for a in ("tensor", "expert") if ici.get(a, 1) > 1]', "1 -> 0"):
        "tensor or expert of size 1 (or missing) counted as asked for adds the same 1 to "
        "model_dropped and 0 to model_moved for every candidate, whose unnamed axes are all 1: "
        "the order is the same",
    ("trainer/tpujob_plan/mesh.py",
     'model = [a for a in ("tensor", "expert") if ici.get(a, 1) > 1]', "> -> >="):
        "as `> 0`: an axis of size 1 counted as asked for shifts every candidate's key alike",
    ("trainer/tpujob_plan/mesh.py",
     "model_moved = sum(layout[a] != ici.get(a, 1) for a in model)", "1 -> 0"):
        "every axis in `model` is in ici with a size above 1: the default is never read",
    ("trainer/tpujob_plan/mesh.py", "_SUGGESTION_BUDGET = 20000", "20000 -> 20001"):
        "a budget one larger changes nothing unless a slice has over 20,000 factorizations "
        "into the axes asked for; none has",
    ("operator/tpujob/builders/wiring.py",
     'return ",".join(str(d) for d in (*dims, 1, 1)[:3])', "1 -> 0"):
        "both callers pass 3 numbers, so the padding is never read",
    ("operator/tpujob/builders/wiring.py",
     "process_grid = (1, 2, 1) if chips == 2 else (1, 1, 1)", "1 -> 0"):
        "the (1, 1, 1) branch: only tpu7x-standard-4t runs 2 containers a host (plan_slice "
        "refuses any other), 2 chips each, so chips is always 2 here (the 1s of (1, 2, 1) are "
        "pinned by TPU_CHIPS_PER_PROCESS_BOUNDS)",
    ("operator/tpujob/builders/wiring.py",
     "process_bounds = tuple(t // p for t, p in zip((*topology, 1, 1)[:3], process_grid,",
     "1 -> 0"): "only tpu7x runs 2 containers a host, and its topologies are all 3-D, so the "
                "padding is never read",
    ("operator/tpujob/builders/wiring.py", "strict=True))", "True -> False"):
        "both sides of the zip have 3 items whatever the topology",
    ("operator/tpujob/local/apiserver/patch.py",
     "return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))",
     "True -> False"): "the lengths are compared first, so zip never sees lists of two lengths",
    ("operator/tpujob/controller/progress_status.py",
     "step = max(prev.last_checkpoint_step, reading.last_checkpoint_step or 0)", "0 -> 1"):
        "only reached when prev.last_checkpoint_step is truthy, so at least 1 (a step number "
        "is >= 0): the max is the same with 0 or 1",
    ("operator/tpujob/controller/observe.py",
     "_RANK = {FailureReason.ERROR: 1, FailureReason.PREEMPTED: 2}", "2 -> 3"):
        "the ranks only sort (others 0, then 1, then 2 or 3): the same order",
    ("operator/tpujob/controller/trainer_reports.py",
     "found.append((index if isinstance(index, int) else 1 << 30, reading))", "30 -> 31"):
        "the key only puts process 0 first; the others keep only their step, which goodput "
        "takes the max of, so their order changes nothing",
    ("operator/tpujob/local/apiserver/strategic.py",
     "return _hashable(x.get(key) if key and isinstance(x, dict) else x)", "and -> or"):
        "with a merge key every item is a dict (_merge_list refuses any other), and without one "
        "no item is: the two tests never disagree",
    ("operator/tpujob/local/apiserver/strategic.py",
     "live_ids.index(left) < live_ids.index(right):", "< -> <="):
        "left is a live-only item and right a patch item: never the same item, so never the "
        "same index",
    ("operator/tpujob/local/apiserver/store.py", "@dataclass(frozen=True)", "True -> False"):
        "nothing assigns to an Event or hashes one: events only go into the history deque and "
        "the watchers' queues",
    ("operator/tpujob/local/apiserver/store.py",
     "def __init__(self, registry: Registry, history: int = 2000,", "2000 -> 2001"):
        "the server always passes its own history size (ApiHandler's `history`); the default is "
        "never read",
    ("operator/tpujob/local/apiserver/store.py",
     "self.rv = 1000  # starts above 1, so that a watch from a very old version gets 410",
     "1000 -> 1001"):
        "resourceVersions are opaque to clients (Kubernetes API conventions): only their order "
        "and equality show, and both are the same counted from 1001; a watch from a very old "
        "version still gets 410",
    ("trainer/tpujob_plan/catalog.py", "elif count is None or count > counts[-1]:", "> -> >="):
        "a count equal to the largest is a valid size and returned before this line",
    ("trainer/tpujob_trainer/loop.py", "if jax.process_count() > 1:", "> -> >="):
        "with one process the broadcast hands process 0's own attempt back, and the name is "
        "rebuilt as it was made (lowercase hex, no leading zero); with several both are true",
    ("trainer/tpujob_trainer/loop.py", "if jax.process_count() > 1:", "1 -> 0"):
        "as `>= 1`: one process broadcasting its attempt to itself keeps it unchanged",
    ("trainer/tpujob_trainer/loop.py",
     'tokens_sharding = named_sharding(("batch", None), (B, L + 1), mesh)', "+ -> -"):
        "the second dimension has no logical axis (None), so logical_to_spec never reads its "
        "size, and a NamedSharding holds no shape: the same sharding for any length",
    ("trainer/tpujob_trainer/loop.py",
     'tokens_sharding = named_sharding(("batch", None), (B, L + 1), mesh)', "1 -> 0"):
        "as `L - 1`: the size of a dimension without a logical axis is never read",
}
# A fixed sample of known mutants across the core, each with the fast tests that kill it:
# `--sample` plants them one at a time (tests/tools/test_mutation_sample.py runs it in CI), so a
# change that leaves the tests unable to fail on these bugs is seen in every run, not only when
# someone measures a module. (module, the source line as written, the mutation, the tests.)
SAMPLE: list[tuple[str, str, str, list[str]]] = [
    ("trainer/tpujob_plan/catalog.py", "return self.chips * self.generation.devices_per_chip",
     "* -> /", ["tests/plan/test_catalog.py::test_names_resolve"]),
    ("trainer/tpujob_plan/memory.py", "USABLE_HBM_FRACTION = 0.95", "0.95 -> 1.4249999999999998",
     ["tests/plan/test_memory_and_flops.py::test_memory_of_muon_moe_and_the_fit_boundary_by_hand"]),
    ("operator/tpujob/builders/jobset.py",
     "TERMINATION_GRACE_SECONDS = 120  # time to finish an async checkpoint after SIGTERM",
     "120 -> 121", ["tests/builders/test_builder_pins.py::"
                    "test_the_grace_period_leaves_two_minutes_for_the_last_checkpoint"]),
    ("operator/tpujob/controller/decide.py",
     "passed = deadline is not None and obs.now > deadline",
     "> -> >=", ["tests/controller/test_decide_status.py::"
                 "test_no_step_for_exactly_the_allowance_is_not_yet_a_stall"]),
    ("operator/tpujob/controller/observe.py", 'if self.k8s_reason == "OOMKilled":', "== -> !=",
     ["tests/controller/test_observe.py::test_classify"]),
    ("operator/tpujob/controller/reconcile.py",
     'events = [e for e in events if e.reason != "Created"]', "!= -> ==",
     ["tests/controller/test_reconcile_paths.py::"
      "test_a_jobset_found_by_a_409_is_adopted_when_it_is_the_jobs"]),
    ("operator/tpujob/controller/kube.py", "RETRY_STATUSES = {409, 429, 500, 502, 503, 504}",
     "502 -> 503", ["tests/controller/test_kube_api.py::"
                    "test_an_answer_is_sorted_into_retry_later_or_refused"]),
    ("operator/tpujob/local/apiserver/selectors.py",
     "if not (_NAME.match(name) and len(name) <= 63", "63 -> 64",
     ["tests/apiserver/test_selectors_unit.py::test_label_key_and_value_limits"]),
    ("trainer/tpujob_trainer/contract.py", "RETRY_EXIT_CODE = 42", "42 -> 43",
     ["tests/trainer/test_termination_message.py::"
      "test_exit_codes_are_the_ones_docs_trainer_md_documents"]),
    ("trainer/tpujob_trainer/config/train.py",
     'steps: int = Field(100, ge=1, description="Total optimizer steps of the run (a resumed '
     'run continues to it).")', "1 -> 0", ["tests/trainer/test_config_fields.py"]),
    ("trainer/tpujob_trainer/loop.py",
     "if pending_step % cfg.metrics.log_every == 0 or pending_step == total:", "or -> and",
     ["tests/trainer/test_loop_steps.py::"
      "test_step_lines_every_log_every_steps_and_the_last_with_moe_loss"]),
]
PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-header",
               "--timeout=120"]


# -- mutants ----------------------------------------------------------------------------------

COMPARE_SWAPS: dict[type, type] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot,
    ast.IsNot: ast.Is}
BINOP_SWAPS: dict[type, type] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult}
SYMBOL = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
          ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not", ast.Add: "+",
          ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
          ast.Pow: "**", ast.And: "and", ast.Or: "or"}


@dataclass(frozen=True)
class Mutant:
    index: int
    line: int
    what: str


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes (never mutated)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _sites(tree: ast.AST) -> Iterator[tuple[ast.AST, str, object]]:
    """Every place a mutant can be made: (node, kind, detail), in a fixed order."""
    skip = _docstrings(tree)
    annotations: set[int] = set()
    for node in ast.walk(tree):  # type annotations are not behaviour
        for ann in (getattr(node, "annotation", None), getattr(node, "returns", None)):
            if ann is not None:
                annotations.update(id(n) for n in ast.walk(ann))
    for node in ast.walk(tree):
        if id(node) in skip or id(node) in annotations:
            continue
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in COMPARE_SWAPS:
                    yield node, "compare", i
        elif isinstance(node, ast.BinOp) and type(node.op) in BINOP_SWAPS:
            if isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) and \
                    isinstance(node.left.value, str):
                continue  # "%s" % x formatting
            yield node, "binop", None
        elif isinstance(node, ast.AugAssign) and type(node.op) in BINOP_SWAPS:
            yield node, "binop", None
        elif isinstance(node, ast.BoolOp):
            yield node, "boolop", None
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield node, "not", None
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            yield node, "bool", None
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
            yield node, "number", None


def _describe(node: ast.AST, kind: str, detail: object) -> str:
    if kind == "compare":
        op = node.ops[detail]
        return f"{SYMBOL[type(op)]} -> {SYMBOL[COMPARE_SWAPS[type(op)]]}"
    if kind == "binop":
        return f"{SYMBOL[type(node.op)]} -> {SYMBOL[BINOP_SWAPS[type(node.op)]]}"
    if kind == "boolop":
        return f"{SYMBOL[type(node.op)]} -> {'or' if isinstance(node.op, ast.And) else 'and'}"
    if kind == "not":
        return "not x -> x"
    if kind == "bool":
        return f"{node.value} -> {not node.value}"
    return f"{node.value!r} -> {_bumped(node.value)!r}"


def _bumped(value: int | float) -> int | float:
    if value == 0:
        return 1
    if value == 1:
        return 0 if isinstance(value, int) else 2.0
    return value + 1 if isinstance(value, int) else value * 1.5


def _apply(node: ast.AST, kind: str, detail: object) -> ast.AST | None:
    """Mutate `node` in place; returns a replacement node when the node itself is replaced."""
    if kind == "compare":
        node.ops[detail] = COMPARE_SWAPS[type(node.ops[detail])]()
    elif kind == "binop":
        node.op = BINOP_SWAPS[type(node.op)]()
    elif kind == "boolop":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind == "not":
        return node.operand
    elif kind == "bool":
        node.value = not node.value
    else:
        node.value = _bumped(node.value)
    return None


def mutants(source: str) -> list[Mutant]:
    tree = ast.parse(source)
    return [Mutant(i, getattr(node, "lineno", 0), _describe(node, kind, detail))
            for i, (node, kind, detail) in enumerate(_sites(tree))]


def mutated_source(source: str, index: int) -> str:
    tree = ast.parse(source)
    for i, (node, kind, detail) in enumerate(_sites(tree)):
        if i != index:
            continue
        replacement = _apply(node, kind, detail)
        if replacement is not None:
            for parent in ast.walk(tree):
                for field, value in ast.iter_fields(parent):
                    if value is node:
                        setattr(parent, field, replacement)
                    elif isinstance(value, list):
                        parent_list = value
                        for j, item in enumerate(parent_list):
                            if item is node:
                                parent_list[j] = replacement
        return ast.unparse(tree)
    raise IndexError(index)


# -- running ----------------------------------------------------------------------------------

def _prepare(work: Path) -> None:
    """A fresh copy of the source roots and tests, without bytecode (a mutant written in the
    same second as the last, with the same size, must not be served from a stale .pyc)."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, work / name, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, work / name)
    paths = [str(work / "operator"), str(work / "trainer"), str(work)]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)  # for the tests' own subprocesses
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    sys.dont_write_bytecode = True
    sys.path[:0] = paths


def _preload() -> None:
    """Import what every child needs but nothing of the project (the child imports that fresh,
    mutant included)."""
    import hypothesis  # noqa: F401
    import pydantic  # noqa: F401
    import pytest  # noqa: F401
    import yaml  # noqa: F401


def _run_tests(work: Path, tests: list[str], timeout_s: float) -> tuple[str, float]:
    """('passed' | 'failed' | 'timeout', seconds) of one pytest run in a forked child."""
    code, seconds = _run_pytest(work, tests, timeout_s)
    return {0: "passed", None: "timeout"}.get(code, "failed"), seconds


def _run_pytest(work: Path, tests: list[str], timeout_s: float) -> tuple[int | None, float]:
    """(pytest's exit code, or None on timeout; seconds) of one run in a forked child."""
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.chdir(work)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            import pytest
            code = pytest.main([*PYTEST_ARGS, *tests])
        except BaseException:
            code = 99
        os._exit(int(code))
    deadline = start + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), time.monotonic() - start
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None, time.monotonic() - start
        time.sleep(0.02)


def _load_results() -> dict[tuple[str, str, int], dict]:
    found = {}
    if RESULTS.exists():
        for line in RESULTS.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                found[(r["module"], r["sha"], r["index"])] = r
    return found


def run(modules: list[str], shard: int, shards: int, budget_s: float | None) -> None:
    work = STATE / f"work-{shard}-{os.getpid()}"  # runs side by side never share a copy
    _prepare(work)
    try:
        _run_modules(work, modules, shard, shards, budget_s)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_modules(work: Path, modules: list[str], shard: int, shards: int,
                 budget_s: float | None) -> None:
    _preload()
    done = _load_results()
    started = time.monotonic()
    for module in modules:
        source = (ROOT / module).read_text()
        sha = hashlib.sha256(source.encode()).hexdigest()[:16]
        # A killed mutant stays killed (tests only grow); a survivor is tried again, since a
        # test added since may kill it.
        todo = [m for m in mutants(source) if m.index % shards == shard
                and done.get((module, sha, m.index), {}).get("status", "survived") == "survived"]
        if not todo:
            continue
        target = work / module
        baseline, seconds = _run_tests(work, MODULES[module], PER_MUTANT_TIMEOUT_S)
        if baseline != "passed":
            print(f"{module}: its tests do not pass unmutated ({baseline}); skipped", flush=True)
            continue
        timeout_s = max(10.0, 3 * seconds)
        print(f"{module}: {len(todo)} mutants, tests take {seconds:.1f} s", flush=True)
        try:
            for m in todo:
                if budget_s is not None and time.monotonic() - started > budget_s:
                    print("budget spent; run again to go on", flush=True)
                    return
                target.write_text(mutated_source(source, m.index))
                outcome, took = _run_tests(work, MODULES[module], timeout_s)
                status = {"passed": "survived", "failed": "killed",
                          "timeout": "killed-timeout"}[outcome]
                record = {"module": module, "sha": sha, "index": m.index, "line": m.line,
                          "what": m.what, "status": status, "seconds": round(took, 2)}
                with RESULTS.open("a") as f:
                    f.write(json.dumps(record) + "\n")
                if status == "survived":
                    print(f"  survived {module}:{m.line} {m.what}", flush=True)
        finally:
            target.write_text(source)


def find_mutant(source: str, line_text: str, what: str) -> Mutant:
    """The one mutant `what` of the line that reads `line_text` (stripped)."""
    lines = source.splitlines()
    found = [m for m in mutants(source)
             if m.what == what and lines[m.line - 1].strip() == line_text]
    if len(found) != 1:
        raise LookupError(f"{len(found)} mutants {what!r} of the line {line_text!r}")
    return found[0]


def check_sample() -> int:
    """Plant each SAMPLE mutant; 0 when its tests pass unmutated and fail (exit 1) on it."""
    work = STATE / f"sample-{os.getpid()}"
    _prepare(work)
    _preload()
    missed = []
    try:
        for module, line_text, what, tests in SAMPLE:
            source = (ROOT / module).read_text()
            where = f"{module}: {what} in {line_text!r}"
            try:
                mutant = find_mutant(source, line_text, what)
            except LookupError as err:
                missed.append(f"{where}: not found ({err}); the line changed: pick a mutant "
                              "of it, or of another line, in SAMPLE")
                continue
            before, _ = _run_pytest(work, tests, PER_MUTANT_TIMEOUT_S)
            (work / module).write_text(mutated_source(source, mutant.index))
            try:
                after, seconds = _run_pytest(work, tests, PER_MUTANT_TIMEOUT_S)
            finally:
                (work / module).write_text(source)
            if before != 0 or after != 1:
                missed.append(f"{where}: {' '.join(tests)} exit {before} unmutated and "
                              f"{after} mutated (want 0, then 1)")
            print(f"{'killed ' if after == 1 else 'MISSED '} {module}:{mutant.line} {what} "
                  f"({seconds:.1f} s)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for line in missed:
        print(f"not killed: {line}", flush=True)
    return 1 if missed else 0


def report(modules: list[str]) -> int:
    done = _load_results()
    print(f"{'module':50} {'mutants':>7} {'killed':>6} {'equiv':>5} {'survived':>8} "
          f"{'killed/non-equivalent':>6}")
    survivors = []
    for module in modules:
        source = (ROOT / module).read_text()
        sha = hashlib.sha256(source.encode()).hexdigest()[:16]
        total = mutants(source)
        results = [done[(module, sha, m.index)] for m in total if (module, sha, m.index) in done]
        if not results:
            print(f"{module:50} {len(total):>7} {'not run':>17}")
            continue
        lines = source.splitlines()
        killed = sum(r["status"].startswith("killed") for r in results)
        alive = [(module, r["line"], r["what"], lines[r["line"] - 1].strip())
                 for r in results if r["status"] == "survived"]
        equivalent = [a for a in alive if (module, a[3], a[2]) in EQUIVALENT]
        rate = 100.0 * killed / max(1, len(results) - len(equivalent))
        partial = "" if len(results) == len(total) else f" ({len(results)} run)"
        print(f"{module:50} {len(total):>7} {killed:>6} {len(equivalent):>5} "
              f"{len(alive) - len(equivalent):>8} {rate:>5.1f}%{partial}")
        survivors += alive
    if survivors:
        print("\nsurvivors:")
        by_module = defaultdict(list)
        for module, line, what, text in survivors:
            by_module[module].append((line, what, text))
        for module, items in by_module.items():
            for line, what, text in sorted(items):
                why = EQUIVALENT.get((module, text, what))
                print(f"  {module}:{line}  {what:14}  {text[:90]}"
                      + (f"\n      equivalent: {why}" if why else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="paths as in MODULES (default: all)")
    parser.add_argument("--shard", default="0/1", help="i/n: this run takes mutant i of n")
    parser.add_argument("--budget", type=float, help="stop starting mutants after N seconds")
    parser.add_argument("--report", action="store_true", help="print the table and stop")
    parser.add_argument("--list", action="store_true", help="print each module's mutants")
    parser.add_argument("--sample", action="store_true",
                        help="plant the fixed SAMPLE of mutants; exit 1 unless each is killed")
    args = parser.parse_args(argv)
    if args.sample:
        STATE.mkdir(exist_ok=True)
        return check_sample()
    modules = args.modules or list(MODULES)
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        parser.error(f"not in MODULES: {', '.join(unknown)} (known: {', '.join(MODULES)})")
    if args.list:
        for module in modules:
            for m in mutants((ROOT / module).read_text()):
                print(f"{module}:{m.line} #{m.index} {m.what}")
        return 0
    if args.report:
        return report(modules)
    shard, shards = (int(x) for x in args.shard.split("/"))
    if not 0 <= shard < shards:
        parser.error("--shard i/n needs 0 <= i < n")
    STATE.mkdir(exist_ok=True)
    run(modules, shard, shards, args.budget)
    return report(modules)


if __name__ == "__main__":
    sys.exit(main())
