"""Judged answer metrics: claim-level faithfulness, answer correctness and context relevance.

`verdicts` defines what is asked (prompts, labels, the prompt version), `judges` who answers (the word-support
baseline, llama.cpp in process, an OpenAI-compatible server), `judging` turns answers into verdicts through
the cache and adds up what they cost. `ragopt judge` and `ragopt sweep --judge` use them.
"""
