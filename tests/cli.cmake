# End-to-end tests of the osdp command line: each tests/cli_*.sh gets the built binary (and, for
# the ones that also run on two ranks, the mpirun command) as arguments and prints
# "N passed, M failed".
set(OSDP_CLI_TEST_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)

add_test(NAME cli_errors
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_errors.sh $<TARGET_FILE:osdp> ${OSDP_MPIRUN})
add_test(NAME cli_learn
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_learn.sh $<TARGET_FILE:osdp>)
add_test(NAME cli_determinism
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_determinism.sh $<TARGET_FILE:osdp> ${OSDP_MPIRUN})
add_test(NAME cli_checkpoint
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_checkpoint.sh $<TARGET_FILE:osdp> ${OSDP_MPIRUN})
add_test(NAME cli_describe
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_describe.sh $<TARGET_FILE:osdp>)
add_test(NAME cli_llama
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_llama.sh $<TARGET_FILE:osdp> ${OSDP_MPIRUN})
# Help and parser from one table: every listed flag accepted as listed, typos named, defaults
# checked, --version.
add_test(NAME cli_help
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_help.sh $<TARGET_FILE:osdp>)

set_tests_properties(cli_errors cli_learn cli_determinism cli_checkpoint cli_describe cli_llama cli_help
  PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS cli)
set_tests_properties(cli_errors cli_determinism cli_checkpoint cli_describe cli_llama cli_help PROPERTIES TIMEOUT 180)
set_tests_properties(cli_learn PROPERTIES TIMEOUT 300)

# The planning path: profile, plan, train --plan FILE and --plan auto on 2 ranks.
add_test(NAME cli_auto
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_auto.sh $<TARGET_FILE:osdp> ${OSDP_MPIRUN})
set_tests_properties(cli_auto PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS cli TIMEOUT 300)

# Plans for several hosts: the issue's acceptance command (gpt2-1.5b on 16 ranks, 8 per host, slow
# links between hosts: shards within hosts, faster than every uniform plan over all 16), the
# flags' errors, a device file with two link levels, a hybrid plan trained on 4 ranks.
add_test(NAME cli_hybrid
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_hybrid.sh $<TARGET_FILE:osdp> ${OSDP_MPIRUN})
set_tests_properties(cli_hybrid PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS cli TIMEOUT 180)

# Pictures of plans: describe --svg / plan --svg carry describe --json's bytes, are well-formed
# XML (xmllint) and fail cleanly on unwritable paths.
add_test(NAME cli_svg
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_svg.sh $<TARGET_FILE:osdp>)
set_tests_properties(cli_svg PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS cli TIMEOUT 120)

# Plan files run as written: measured peak == predicted for hand-written plans on 2 ranks, and
# the predictions differ between strategies, slicing and prefetch as they should.
add_test(NAME cli_plans
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_plans.sh $<TARGET_FILE:osdp> ${OSDP_MPIRUN})
set_tests_properties(cli_plans PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS cli TIMEOUT 180)

# Checkpoints and --resume: bit-identical continuation (1 process ddp, 2 ranks zero3), resharding
# 2 x zero3 -> 4 x ddp (1e-5), a SIGKILLed rank (non-zero exit within 30 s, then resume), a damaged
# newest checkpoint skipped, bad options refused in one line.
add_test(NAME cli_resume
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_resume.sh $<TARGET_FILE:osdp> $<TARGET_FILE:plan_tool> ${OSDP_MPIRUN})
set_tests_properties(cli_resume PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS cli TIMEOUT 300)

# Outputs on a full disk (a small tmpfs; skipped where it cannot be mounted): plan/profile --out,
# --log, --save and --checkpoint fail in one line, keep the previous file, leave nothing partial.
add_test(NAME cli_fulldisk COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_fulldisk.sh $<TARGET_FILE:osdp>)
set_tests_properties(cli_fulldisk PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS cli TIMEOUT 120
  SKIP_RETURN_CODE 77)

# Outputs that destroy nothing: device nodes (made with mknod in the work directory) and
# symlinks written through, never replaced; an output that is an input or another output refused
# before any work with every file unchanged; a full stdout an error (skipped without mknod).
add_test(NAME cli_outputs COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_outputs.sh $<TARGET_FILE:osdp>)
set_tests_properties(cli_outputs PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS cli TIMEOUT 180
  SKIP_RETURN_CODE 77)

# A run owns what it writes and checks what it continues: checkpoint directories of one run (run
# ids, a lock, overwrite, pruning that follows no link), resume checks (step, data file), ranks
# that disagree, the watchdog during checkpoint writes, failures that used to say nothing.
add_test(NAME cli_runs COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_runs.sh $<TARGET_FILE:osdp> ${OSDP_MPIRUN})
set_tests_properties(cli_runs PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS cli TIMEOUT 240)

# SIGKILL at random moments of runs checkpointing every step (1 process, and one of 2 zero3
# ranks), 3 times each; resumed runs end byte-identical to uninterrupted ones (issue 22's
# acceptance runs it 20 times: bash tests/kill_loop.sh build/osdp 20 mpirun --oversubscribe).
add_test(NAME kill_loop COMMAND bash ${PROJECT_SOURCE_DIR}/tests/kill_loop.sh $<TARGET_FILE:osdp> 3 ${OSDP_MPIRUN})
set_tests_properties(kill_loop PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS cli TIMEOUT 400)

# Two hosts for real: network namespaces made by scripts/hosts.sh (names and subnet of the
# test's own), 2 ranks each over a tbf-shaped link; a hybrid run's losses against one process,
# peaks against the prediction, nothing left behind. Skipped where namespaces cannot be made.
add_test(NAME hosts COMMAND bash ${PROJECT_SOURCE_DIR}/tests/hosts.sh $<TARGET_FILE:osdp> $<TARGET_FILE:plan_tool>)
set_tests_properties(hosts PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS "hosts" TIMEOUT 300
  SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)

# osdp sample on every family: greedy over the KV cache equals the full forward, seeds repeat,
# errors are one line.
add_test(NAME cli_sample
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_sample.sh $<TARGET_FILE:osdp>)
set_tests_properties(cli_sample PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS cli TIMEOUT 180)

# osdp plot: real logs drawn as well-formed SVG whose per-run numbers are the logs', a skipped
# step and held-out lines, --json, escaping, and bad logs or outputs as one error line.
add_test(NAME cli_plot
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_plot.sh $<TARGET_FILE:osdp>)
set_tests_properties(cli_plot PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS cli TIMEOUT 120)

# Absurd but well-formed input (issue 42, item 5): device figures beyond physical ranges, a loss
# of 1e308 plotted, optimizer and --plan auto options out of range, --steps 0, a header of 70,000
# tensors, a plan's huge micro-batch, 1e999 in a config.json: one error line naming the value and
# its range with every file unchanged, or the right numbers.
add_test(NAME cli_bounds
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_bounds.sh $<TARGET_FILE:osdp>)
set_tests_properties(cli_bounds PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS cli TIMEOUT 120)

# Inputs that cannot hang osdp and directories of its own that cannot be turned against its user
# (issue 42): fifo inputs refused at once, output fifos without a reader after a short wait, a
# profile cache that writes nothing through links and reuses no replaced entry, checkpoint locks
# and leftovers, a rank stopped during start-up ending the job within its bound.
add_test(NAME cli_hostile
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_hostile.sh $<TARGET_FILE:osdp> ${OSDP_MPIRUN})
set_tests_properties(cli_hostile PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS cli TIMEOUT 240)

# --precision bf16 on the CPU (issue 43): refused naming the instruction set where the CPU lacks
# native bf16; with products emulated there (OSDP_CPU_BF16_EMULATE=1), the CPU's bf16 table
# against fp32 (losses 1e-3, norms 3e-3, a lower peak equal to the prediction) and plans on 2
# ranks (zero3 with bf16 gathers, zero2, ddp, kept whole) and recomputation against one process.
add_test(NAME cli_cpu_bf16
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_cpu_bf16.sh $<TARGET_FILE:osdp> $<TARGET_FILE:plan_tool>
          ${OSDP_MPIRUN})
set_tests_properties(cli_cpu_bf16 PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS cli TIMEOUT 240)
