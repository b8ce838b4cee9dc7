"""Drives the server with the official `openai` client and prints what it saw as JSON.

Usage: python3 openai_check.py BASE_URL MODEL
The Rust test (tests/server_api.rs) compares the tokens against the engine's own output.
"""
import json
import sys

import openai
from openai import OpenAI

base_url, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=300)
out = {"models": [m.id for m in client.models.list().data], "retrieved": client.models.retrieve(model).id}

# Streaming chat completion, with usage at the end.
stream = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "What is the capital of France?"}],
    max_tokens=24,
    temperature=0,
    stream=True,
    stream_options={"include_usage": True},
    extra_body={"return_token_ids": True},
)
text, ids, finish, usage, roles = "", [], None, None, []
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage.model_dump()
    for choice in chunk.choices:
        if choice.delta.role:
            roles.append(choice.delta.role)
        text += choice.delta.content or ""
        ids += getattr(choice, "token_ids", None) or []
        finish = choice.finish_reason or finish
out["chat_stream"] = {"text": text, "token_ids": ids, "finish_reason": finish, "usage": usage, "roles": roles}

# The same question with its answer as the predicted output (the client's own `prediction`
# parameter); the counts read through the client's own usage types.
predicted = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "What is the capital of France?"}],
    max_tokens=24,
    temperature=0,
    prediction={"type": "content", "content": text},
)
details = predicted.usage.completion_tokens_details
out["predicted"] = {
    "text": predicted.choices[0].message.content,
    "accepted": details.accepted_prediction_tokens,
    "rejected": details.rejected_prediction_tokens,
}

# Non-streaming completion, greedy, exactly max_tokens tokens.
completion = client.completions.create(
    model=model,
    prompt="The quick brown fox",
    max_tokens=24,
    temperature=0,
    extra_body={"return_token_ids": True, "ignore_eos": True},
)
choice = completion.choices[0]
out["completion"] = {
    "text": choice.text,
    "token_ids": getattr(choice, "token_ids", None),
    "finish_reason": choice.finish_reason,
    "usage": completion.usage.model_dump(),
}

# Non-streaming chat with logprobs, parsed by the client's own types.
chat = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Say hello."}],
    max_tokens=6,
    temperature=0,
    logprobs=True,
    top_logprobs=2,
)
content = chat.choices[0].logprobs.content
out["chat_logprobs"] = [
    {"token": c.token, "logprob": c.logprob, "top": [[t.token, t.logprob] for t in c.top_logprobs]} for c in content
]
out["chat_text"] = chat.choices[0].message.content

# n = 2 and two prompts: four choices, read through the client's own types.
multi = client.completions.create(model=model, prompt=["Hi", "Bye"], max_tokens=2, n=2, seed=3, temperature=1.0)
out["n2_completions"] = [{"index": c.index, "text": c.text, "finish_reason": c.finish_reason} for c in multi.choices]
chat2 = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=2, n=2)
out["n2_chat"] = [c.index for c in chat2.choices]
# n beyond the limit is a 400 the client raises as BadRequestError.
try:
    client.completions.create(model=model, prompt="x", max_tokens=2, n=1000)
    out["n2"] = None
except openai.BadRequestError as e:
    out["n2"] = {"status": e.status_code, "body": e.body}

print(json.dumps(out))
