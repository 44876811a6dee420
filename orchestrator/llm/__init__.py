"""The model: the only package that imports ``openai``.

    client.py    LLMClient: one chat completion, streaming, retries with backoff
    types.py     LLMConfig, Completion, ToolCall, the ChatModel protocol (no SDK import)
    pricing.py   Usage and what it costs
    endpoints.py which endpoint, key and price each model gets (models:), one client per endpoint
    ledger.py    the ledger of spend: one durable line per model call, which every report reads
    scripted.py  ScriptedServer: an OpenAI-compatible server on 127.0.0.1 for tests and demos
    script.py    the steps such a server answers with, and their wire form
"""
