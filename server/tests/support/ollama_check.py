"""Drives the server's Ollama API with the official `ollama` Python client and prints what it saw as JSON.

Usage: python3 ollama_check.py BASE_URL MODEL
The Rust test (tests/server_dialects.rs) compares it with the engine's own output for the same
conversation.
"""
import json
import sys

import ollama

base_url, model = sys.argv[1], sys.argv[2]
client = ollama.Client(host=base_url, timeout=300)
greedy = {"temperature": 0, "num_predict": 24}
out = {}
question = [{"role": "user", "content": "What is the capital of France?"}]

out["tags"] = [m.model for m in client.list().models]
shown = client.show(model)
out["show"] = {"capabilities": shown.capabilities, "family": shown.details.family, "info": dict(shown.modelinfo)}
out["ps"] = [m.context_length for m in client.ps().models]

r = client.chat(model=model, messages=question, options=greedy)
out["chat"] = {
    "content": r.message.content,
    "done": r.done,
    "done_reason": r.done_reason,
    "prompt_eval_count": r.prompt_eval_count,
    "eval_count": r.eval_count,
    "durations": [r.total_duration, r.prompt_eval_duration, r.eval_duration],
}

chunks = list(client.chat(model=model, messages=question, options=greedy, stream=True))
out["chat_stream"] = {
    "content": "".join(c.message.content or "" for c in chunks),
    "pieces": len(chunks),
    "done": [c.done for c in chunks],
    "done_reason": chunks[-1].done_reason,
    "eval_count": chunks[-1].eval_count,
}

r = client.chat(model=model, messages=question, options={"temperature": 0, "num_predict": 6}, logprobs=True, top_logprobs=2)
out["logprobs"] = {"content": r.message.content, "entries": [lp.model_dump() for lp in r.logprobs or []]}

r = client.generate(model=model, prompt="def fibonacci(n):", raw=True, options={**greedy, "stop": ["\n\n"]})
out["generate_raw"] = {"response": r.response, "done_reason": r.done_reason, "eval_count": r.eval_count}
r = client.generate(model=model, prompt="What is the capital of France?", options=greedy)
out["generate"] = {"response": r.response, "prompt_eval_count": r.prompt_eval_count}

schema = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population_millions": {"type": "number"}},
    "required": ["city", "population_millions"],
}
r = client.chat(
    model=model,
    messages=[{"role": "user", "content": "Give the largest city of Japan and its population as JSON."}],
    format=schema,
    options={"temperature": 0, "num_predict": 60},
)
out["structured"] = {"content": r.message.content, "schema": schema, "done_reason": r.done_reason}

weather = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
weather_question = [{"role": "user", "content": "What is the weather in Paris right now?"}]
call = client.chat(model=model, messages=weather_question, tools=[weather], options={"temperature": 0, "num_predict": 80})
calls = call.message.tool_calls or []
out["call"] = [{"name": c.function.name, "arguments": dict(c.function.arguments)} for c in calls]
answer = json.dumps({"temperature_c": 18, "sky": "cloudy"})
history = weather_question + [call.message, {"role": "tool", "content": answer, "tool_name": "get_weather"}]
final = client.chat(model=model, messages=history, tools=[weather], options={"temperature": 0, "num_predict": 60})
out["round_trip"] = {
    "content": final.message.content,
    "calls": [{"name": c.function.name, "arguments": dict(c.function.arguments)} for c in final.message.tool_calls or []],
    "prompt_eval_count": final.prompt_eval_count,
    "answer": answer,
}

errors = {}
for name, call_args in {
    "mirostat": dict(messages=question, options={"mirostat": 2}),
    "unknown_option": dict(messages=question, options={"temprature": 0}),
    "think": dict(messages=question, think=True),
    "model": dict(model="llama3.2", messages=question),
}.items():
    try:
        client.chat(**{"model": model, **call_args})
        errors[name] = None
    except ollama.ResponseError as e:
        errors[name] = {"status": e.status_code, "error": e.error}
out["errors"] = errors
print(json.dumps(out))
