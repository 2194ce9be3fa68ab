# The Llama family against PyTorch: osdp's fp64 and fp32 passes (tests/llama_grads.c) against a
# Llama written the way transformers computes it (tests/llama_torch.py) on the same safetensors
# file, loss and every gradient, for an untied GQA config with llama3 rope scaling and a tied
# Qwen2-style one with QKV bias (skipped, exit 77, where python3 has no torch).
osdp_add_test_exe(llama_grads ${PROJECT_SOURCE_DIR}/tests/llama_grads.c)
add_test(NAME llama_torch
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/llama_torch.sh $<TARGET_FILE:llama_grads>)
set_tests_properties(llama_torch PROPERTIES LABELS sanitize SKIP_RETURN_CODE 77 TIMEOUT 300)
