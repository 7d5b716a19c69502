"""Serving under load: `ragopt serve` (FastAPI + uvicorn over a RAG pipeline), its caches and guards, the
llama-server child process, and `ragopt loadtest`."""
