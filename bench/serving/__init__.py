"""The serving path (docs/serving.md, docs/dashboard.md).

- serve.py: raw llama-cpp-python against clawd's HTTP path and llama_cpp.server;
- cache.py: the prompt cache on real OpenClaw requests; load.py: concurrent streaming clients;
- swap.py: adapter hot-swap latency; ttft_training.py: time to first token while training;
- dashboard.py: the dashboard's endpoints, on dashboard_data.py's recorded history.
"""
