"""How to reach one model and what it costs: a plan's or a role file's ``models:`` entry.

One record, shared by the plan format (plan/model.py), role files (roles/roles.py) and the
client configuration (llm/endpoints.py)::

    models:
      llama-3.1-70b:                        # the model name, as teammates and roles name it
        base_url: http://127.0.0.1:8080/v1  # its own OpenAI-compatible endpoint (else $OPENAI_BASE_URL)
        api_key_env: LOCAL_LLM_API_KEY      # the NAME of the variable holding its key (else $OPENAI_API_KEY)
        price: {input: 0.60, output: 0.60}  # US dollars per 1M tokens (else the built-in table, llm/pricing.py)

* ``api_key_env`` names a variable, never holds a key: the key is read from the lead's
  environment when the run starts, so a plan file holds no secret. The name must look like a
  credential's (``*API_KEY*``, ``*TOKEN*``, ``*SECRET*``, ... core/redact.py ``SECRET_NAME``):
  every process of ``team`` scrubs such variables' values from what it writes and keeps them out
  of the environment of what it starts, which is the guarantee that the key reaches no file.
* ``price`` makes a model ``team`` has no list price for (a local model, another provider) count
  in dollars, so a dollar ``budget:`` can hold it (a dollar budget over a model with no price is
  refused before a run starts: llm/endpoints.py). A price given for a model of the built-in table
  wins over the table. ``cached_input`` defaults to ``input``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .redact import SECRET_NAME

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class ModelPrice(BaseModel):
    """List price of a model, US dollars per 1M tokens."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    input: float = Field(ge=0, le=100_000, description="Dollars per 1M prompt tokens.")
    output: float = Field(ge=0, le=100_000, description="Dollars per 1M completion tokens.")
    cached_input: float | None = Field(None, ge=0, le=100_000, description="Dollars per 1M cached prompt "
                                                                           "tokens (default: input).")


class ModelSpec(BaseModel):
    """One model's endpoint, key and price (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    base_url: str | None = Field(None, pattern=r"^https?://\S+$", description="Its OpenAI-compatible endpoint, "
                                 "e.g. http://127.0.0.1:8080/v1 (else $OPENAI_BASE_URL).")
    api_key_env: str | None = Field(None, pattern=ENV_NAME, description="The NAME of the environment variable "
                                    "holding its API key, e.g. GROQ_API_KEY (else $OPENAI_API_KEY); never the key.")
    price: ModelPrice | None = Field(None, description="US dollars per 1M tokens {input, output, cached_input}: "
                                     "what a dollar budget counts (else the built-in table).")

    @field_validator("api_key_env")
    @classmethod
    def _credential_name(cls, value: str | None) -> str | None:
        if value is not None and not SECRET_NAME.search(value):
            raise ValueError(f"{value!r} does not look like the name of a credential, so team would not know to "
                             "keep its value out of files and processes: name the variable like *_API_KEY or "
                             "*_TOKEN (e.g. LOCAL_API_KEY)")
        return value
