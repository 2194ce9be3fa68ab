# The code-layout rules a script can check (docs/ARCHITECTURE.md): nothing in src/planner,
# src/runtime or src/cli names a model family's ops, no token-pasted KN(name) functions, no C
# function over 120 lines.
add_test(NAME code_layout COMMAND bash ${PROJECT_SOURCE_DIR}/tools/check_layout.sh ${PROJECT_SOURCE_DIR}/src)
