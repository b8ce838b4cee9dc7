"""Structured outputs and tool calls through the official `openai` client and its own types.

Usage: python3 structured_check.py BASE_URL MODEL [tools]
Prints what it saw as JSON; the Rust tests (tests/server_structured.rs) check it with an
independent JSON Schema validator and the engine's own behaviour.
"""
import json
import sys
from typing import List, Literal

import openai
from openai import OpenAI
from pydantic import BaseModel

base_url, model = sys.argv[1], sys.argv[2]
mode = sys.argv[3] if len(sys.argv) > 3 else "structured"
client = OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=600)
out = {}


class City(BaseModel):
    name: str
    country: str
    population_millions: float
    landmarks: List[str]
    climate: Literal["hot", "mild", "cold"]


def structured():
    # The client's own parse(): the schema goes out as response_format json_schema (strict)
    # and the reply is validated into the pydantic model by the client.
    parsed = client.beta.chat.completions.parse(
        model=model,
        messages=[{"role": "user", "content": "Describe Paris as JSON."}],
        response_format=City,
        max_tokens=200,
        temperature=0.7,
        seed=3,
    )
    choice = parsed.choices[0]
    out["parse"] = {
        "parsed": choice.message.parsed.model_dump() if choice.message.parsed else None,
        "content": choice.message.content,
        "finish_reason": choice.finish_reason,
        "schema": City.model_json_schema(),
    }
    # vLLM's extra-body forms, unchanged clients.
    choice = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Is the sky blue?"}],
        max_tokens=10,
        extra_body={"guided_choice": ["yes", "no", "sometimes"]},
    ).choices[0]
    out["guided_choice"] = choice.message.content
    text = client.completions.create(
        model=model,
        prompt="A product code:",
        max_tokens=20,
        temperature=1.0,
        extra_body={"structured_outputs": {"regex": "[A-Z]{3}-[0-9]{4}"}},
    ).choices[0].text
    out["regex"] = text
    # json_object, streamed.
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Give me a JSON object about a cat."}],
        response_format={"type": "json_object"},
        max_tokens=120,
        temperature=0.8,
        seed=5,
        stream=True,
    )
    text, finish = "", None
    for chunk in stream:
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    out["json_object_stream"] = {"text": text, "finish_reason": finish}
    # A bad schema is a 400 the client raises as BadRequestError.
    try:
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "x"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}},
        )
        out["bad_schema"] = None
    except openai.BadRequestError as e:
        out["bad_schema"] = {"status": e.status_code, "body": e.body}


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}


# OpenAI's strict form: every property required, no others. The model is not asked for a
# forecast length or a station code, so only the grammar makes it write `days` and `station`.
FORECAST = {
    "type": "function",
    "function": {
        "name": "get_forecast",
        "description": "Weather forecast for a city",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "station": {"type": "string", "pattern": "^[A-Z]{4}$"},
            },
            "required": ["city", "unit", "days", "station"],
            "additionalProperties": False,
        },
    },
}


def call_summary(message):
    calls = message.tool_calls or []
    return [{"id": c.id, "type": c.type, "name": c.function.name, "arguments": c.function.arguments} for c in calls]


def tools():
    question = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    for choice_mode in ["required", "auto"]:
        r = client.chat.completions.create(
            model=model, messages=question, tools=[WEATHER], tool_choice=choice_mode, max_tokens=80, temperature=0
        )
        c = r.choices[0]
        out[f"call_{choice_mode}"] = {
            "calls": call_summary(c.message),
            "content": c.message.content,
            "finish_reason": c.finish_reason,
        }
    r = client.chat.completions.create(
        model=model, messages=question, tools=[FORECAST], tool_choice="auto", max_tokens=80, temperature=0
    )
    c = r.choices[0]
    out["call_strict"] = {
        "calls": call_summary(c.message),
        "content": c.message.content,
        "finish_reason": c.finish_reason,
        "parameters": FORECAST["function"]["parameters"],
    }
    # Streamed: the deltas carry the call's id and name first, then its arguments.
    stream = client.chat.completions.create(
        model=model, messages=question, tools=[WEATHER], tool_choice="required", max_tokens=80, temperature=0, stream=True
    )
    calls, finish, content = {}, None, ""
    for chunk in stream:
        for ch in chunk.choices:
            content += ch.delta.content or ""
            finish = ch.finish_reason or finish
            for d in ch.delta.tool_calls or []:
                entry = calls.setdefault(d.index, {"id": None, "name": None, "arguments": "", "deltas": 0})
                entry["deltas"] += 1
                if d.id:
                    entry["id"] = d.id
                if d.function and d.function.name:
                    entry["name"] = d.function.name
                if d.function and d.function.arguments:
                    entry["arguments"] += d.function.arguments
    out["call_stream"] = {"calls": [calls[k] for k in sorted(calls)], "finish_reason": finish, "content": content}
    # The round trip: the model's call, the tool's answer, the final text.
    first = client.chat.completions.create(
        model=model, messages=question, tools=[WEATHER], tool_choice="required", max_tokens=80, temperature=0
    ).choices[0].message
    call = first.tool_calls[0]
    messages = question + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 18, "sky": "cloudy"})},
    ]
    final = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER], max_tokens=60, temperature=0)
    fc = final.choices[0]
    out["round_trip"] = {
        "content": fc.message.content,
        "calls": call_summary(fc.message),
        "finish_reason": fc.finish_reason,
        "prompt_tokens": final.usage.prompt_tokens,
    }
    # Streamed final answer too.
    stream = client.chat.completions.create(
        model=model, messages=messages, tools=[WEATHER], tool_choice="none", max_tokens=60, temperature=0, stream=True
    )
    text = "".join((c.delta.content or "") for chunk in stream for c in chunk.choices)
    out["round_trip_stream"] = text


def contract():
    # Prefix caching: the second identical request reuses the first one's prompt blocks.
    messages = [{"role": "system", "content": "You are a terse assistant. " * 8}, {"role": "user", "content": "Name a colour."}]
    seen = []
    for _ in range(2):
        r = client.chat.completions.create(model=model, messages=messages, max_tokens=4, temperature=0)
        seen.append({
            "id": r.id,
            "fingerprint": r.system_fingerprint,
            "prompt_tokens": r.usage.prompt_tokens,
            "cached_tokens": r.usage.prompt_tokens_details.cached_tokens,
        })
    out["repeat"] = seen
    stream = client.chat.completions.create(
        model=model, messages=messages, max_tokens=4, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    fingerprints, cached = set(), None
    for chunk in stream:
        fingerprints.add(chunk.system_fingerprint)
        if chunk.usage is not None:
            cached = chunk.usage.prompt_tokens_details.cached_tokens
    out["stream"] = {"fingerprints": sorted(f for f in fingerprints if f), "none": None in fingerprints, "cached_tokens": cached}


if mode == "tools":
    tools()
elif mode == "contract":
    contract()
else:
    structured()
print(json.dumps(out))
