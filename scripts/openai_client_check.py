#!/usr/bin/env python3
"""Checks `sluice serve` with the official `openai` Python client (pip install openai).

Without --url it starts `sluice serve` itself on the tiny test chat model (random weights,
byte tokenizer: the text is gibberish, the protocol is what is checked) and stops it with
SIGTERM at the end. With --url it checks a running server (e.g. a real model).

    python3 scripts/openai_client_check.py [--bin target/release/sluice] [--url http://127.0.0.1:8080]

Prints one line per check and a summary line `N passed, M failed`; exits 1 on a failure.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import openai

results = []


def check(name, fn):
    try:
        detail = fn()
        results.append(True)
        print(f"ok    {name}" + (f": {detail}" if detail else ""))
    except Exception as e:  # noqa: BLE001 - every failure is reported the same way
        results.append(False)
        print(f"FAIL  {name}: {type(e).__name__}: {e}")


def start_server(binary, key):
    tmp = tempfile.mkdtemp(prefix="sluice-openai-check-")
    proc = subprocess.Popen(
        [binary, "serve", "--port", "0", "--context", "256", "--api-key", key,
         "--served-model-name", "tiny-chat", "--demo-model", os.path.join(tmp, "model")],
        stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        sys.stderr.write(line)
        if "listening on " in line:
            return proc, line.split("listening on ")[1].split(" ")[0], tmp
    proc.kill()
    raise SystemExit("sluice serve did not start")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/sluice")
    ap.add_argument("--url", help="a running server (default: start one)")
    ap.add_argument("--api-key", default="sk-check")
    ap.add_argument("--model", default=None, help="model name to send (default: the server's)")
    args = ap.parse_args()
    proc, tmp = None, None
    url = args.url
    if url is None:
        proc, url, tmp = start_server(args.bin, args.api_key)
    client = openai.OpenAI(base_url=url.rstrip("/") + "/v1", api_key=args.api_key, max_retries=0)
    model = args.model or client.models.list().data[0].id
    messages = [{"role": "user", "content": "Say hello."}]

    def chat_whole():
        r = client.chat.completions.create(model=model, messages=messages, max_tokens=8,
                                           temperature=0)
        assert r.object == "chat.completion", r.object
        c = r.choices[0]
        assert c.message.role == "assistant" and isinstance(c.message.content, str)
        assert c.finish_reason in ("stop", "length"), c.finish_reason
        assert r.usage.completion_tokens >= 1 and r.usage.prompt_tokens >= 1
        assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
        return f"{r.usage.completion_tokens} tokens, finish {c.finish_reason}"

    def chat_stream():
        whole = client.chat.completions.create(model=model, messages=messages, max_tokens=8,
                                               temperature=0).choices[0].message.content
        text, finish, usage, n = "", None, None, 0
        for chunk in client.chat.completions.create(
                model=model, messages=messages, max_tokens=8, temperature=0, stream=True,
                stream_options={"include_usage": True}):
            assert chunk.object == "chat.completion.chunk", chunk.object
            n += 1
            if chunk.usage is not None:
                usage = chunk.usage
                continue
            d = chunk.choices[0].delta
            text += d.content or ""
            finish = chunk.choices[0].finish_reason or finish
        assert text == whole, (text, whole)
        assert finish in ("stop", "length") and usage is not None
        return f"{n} chunks, same text as the whole response"

    def completion():
        r = client.completions.create(model=model, prompt="Once upon a time", max_tokens=6,
                                      temperature=0)
        assert r.object == "text_completion" and isinstance(r.choices[0].text, str)
        s = "".join(c.choices[0].text for c in client.completions.create(
            model=model, prompt="Once upon a time", max_tokens=6, temperature=0, stream=True))
        assert s == r.choices[0].text, (s, r.choices[0].text)
        return f"{r.usage.completion_tokens} tokens"

    def bad_request():
        try:
            client.chat.completions.create(model=model, messages=messages, max_tokens=-1)
        except openai.BadRequestError as e:
            return f"400: {e.body['message'] if isinstance(e.body, dict) else e}"
        raise AssertionError("no error for max_tokens=-1")

    def wrong_key():
        bad = openai.OpenAI(base_url=url.rstrip("/") + "/v1", api_key="wrong", max_retries=0)
        try:
            bad.models.list()
        except openai.AuthenticationError:
            return "401"
        raise AssertionError("no 401 with a wrong key")

    check("chat completion", chat_whole)
    check("chat completion, streamed", chat_stream)
    check("text completion, whole and streamed", completion)
    check("bad request is a 400", bad_request)
    check("wrong key is a 401", wrong_key)
    if proc is not None:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        check("SIGTERM exits 0", lambda: None if code == 0 else (_ for _ in ()).throw(
            AssertionError(f"exit {code}")))
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    sys.exit(0 if passed == len(results) else 1)


if __name__ == "__main__":
    main()
