"""Drives the server's Messages API with the official `anthropic` SDK and prints what it saw as JSON.

Usage: python3 anthropic_check.py BASE_URL MODEL
The Rust test (tests/server_dialects.rs) compares it with the engine's own output for the same
conversation. The SDK has no `temperature` argument any more: sampling settings go in `extra_body`.
"""
import json
import sys

import anthropic

base_url, model = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=base_url, api_key="unused", max_retries=0, timeout=300)
greedy = {"temperature": 0}
out = {}
question = [{"role": "user", "content": "What is the capital of France?"}]

r = client.messages.create(model=model, max_tokens=24, messages=question, system="Answer briefly.", extra_body=greedy)
out["create"] = {
    "text": "".join(b.text for b in r.content if b.type == "text"),
    "types": [b.type for b in r.content],
    "stop_reason": r.stop_reason,
    "usage": r.usage.model_dump(),
    "id": r.id,
}

events = []
with client.messages.stream(
    model=model, max_tokens=24, messages=question, system="Answer briefly.", extra_body=greedy
) as stream:
    text = "".join(stream.text_stream)
    final = stream.get_final_message()
out["stream"] = {
    "text": text,
    "final_text": "".join(b.text for b in final.content if b.type == "text"),
    "stop_reason": final.stop_reason,
    "usage": final.usage.model_dump(),
}
# The raw event names, in order.
raw = client.messages.create(model=model, max_tokens=8, messages=question, stream=True, extra_body=greedy)
out["event_types"] = [e.type for e in raw]

r = client.messages.create(model=model, max_tokens=40, messages=question, stop_sequences=["Paris"], extra_body=greedy)
out["stop_sequence"] = {"text": r.content[0].text if r.content else "", "stop_reason": r.stop_reason, "stop_sequence": r.stop_sequence}

out["count"] = client.messages.count_tokens(model=model, messages=question, system="Answer briefly.").input_tokens

# Structured output: output_config.format.
schema = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population_millions": {"type": "number"}},
    "required": ["city", "population_millions"],
    "additionalProperties": False,
}
r = client.messages.create(
    model=model,
    max_tokens=60,
    messages=[{"role": "user", "content": "Give the largest city of Japan and its population as JSON."}],
    output_config={"format": {"type": "json_schema", "schema": schema}},
    extra_body=greedy,
)
out["structured"] = {"text": r.content[0].text, "schema": schema, "stop_reason": r.stop_reason}

# A tool round trip: the call (streamed), the tool's answer as a tool_result, the final answer.
weather = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
weather_question = [{"role": "user", "content": "What is the weather in Paris right now?"}]
tool_events = []
with client.messages.stream(
    model=model, max_tokens=80, tools=[weather], tool_choice={"type": "any"}, messages=weather_question, extra_body=greedy
) as stream:
    for event in stream:
        tool_events.append(event.type)
    call = stream.get_final_message()
tool_use = [b for b in call.content if b.type == "tool_use"][0]
out["call"] = {
    "stop_reason": call.stop_reason,
    "name": tool_use.name,
    "input": tool_use.input,
    "id": tool_use.id,
    "events": tool_events,
}
answer = json.dumps({"temperature_c": 18, "sky": "cloudy"})
history = weather_question + [
    # The SDK's own block, sent back as returned (response-only fields included).
    {"role": "assistant", "content": [tool_use.model_dump()]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": answer}]},
]
final = client.messages.create(model=model, max_tokens=60, tools=[weather], messages=history, extra_body=greedy)
out["round_trip"] = {
    "blocks": [b.model_dump(include={"type", "text", "name", "input"}) for b in final.content],
    "stop_reason": final.stop_reason,
    "usage": final.usage.model_dump(),
    "answer": answer,
}
out["round_trip_count"] = client.messages.count_tokens(model=model, tools=[weather], messages=history).input_tokens

# The SDK's error types on bad input.
errors = {}
bad = {
    "unknown_field": dict(messages=question, extra_body={"temprature": 0}),
    "image": dict(
        messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]
    ),
    "orphan_tool_result": dict(
        messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "1"}]}]
    ),
}
for name, kwargs in bad.items():
    try:
        client.messages.create(model=model, max_tokens=8, **kwargs)
        errors[name] = None
    except anthropic.BadRequestError as e:
        errors[name] = {"status": e.status_code, "type": e.body["error"]["type"], "message": e.body["error"]["message"]}
try:
    client.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=question)
    errors["model"] = None
except anthropic.NotFoundError as e:
    errors["model"] = {"status": e.status_code, "type": e.body["error"]["type"]}
out["errors"] = errors
print(json.dumps(out))
