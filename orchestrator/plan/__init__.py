"""``plan.yaml``: the format, loading and validation, analysis. Pure: nothing is written here.

    model.py     the pydantic models and the JSON Schema (``team plan schema``)
    load.py      load_plan: parse with line numbers and validate whole
    analysis.py  cycles, topological order, waves, critical path
"""
