"""Models and engines sweeper can make for itself: random-weight GGUF files for llama.cpp, and
where the llama-server build lives.

- cli.py          `sweeper models ...`: make the models sweeper can serve without a model hub
- random_gguf.py  a llama-architecture GGUF with random weights and a real tokenizer"""
