"""Models and engines sweeper can make for itself: random-weight GGUF files for llama.cpp, and
where the llama-server build lives."""
