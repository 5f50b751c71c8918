"""Time to first token while the daemon trains, against one training micro-step (issue 6).

    python -m bench.serving.ttft_training                      # bundled SmolLM2, 6 probes each way
    python -m bench.serving.ttft_training --model X.gguf --probes 10 --threads 1

One daemon, real HTTP, its own scheduler doing the work:
1. idle: probe requests (a fresh one-question session each, streamed, 8 tokens) on the daemon
   with nothing to do: the baseline time to first token.
2. training: scripted conversations whose follow-ups carry feedback make a backlog; the daemon
   judges it and starts a training round by itself. Each probe is then sent at a random moment
   while the trainer is computing (status `doing` = "training", past model load). The daemon
   pauses the child as the request is admitted; the micro-step under way runs to its end.
The target: training TTFT ≤ idle TTFT + one micro-step, for every probe. Micro-step times are
the trainer's own (`micro_step_s` in its step events, and mean/max in the round's metrics).
Results also go to bench/out/ttft_training.json.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import Daemon, stream_chat, write_result

SYSTEM = "You are a helpful assistant. Answer briefly."
CONVERSATIONS = [
    ("What is the capital of France?", "Thanks, that's exactly right!"),
    ("Give me a word that rhymes with cat.", "No, that's wrong. That does not rhyme at all, try again."),
    ("What is 2 + 2?", "Perfect, thank you."),
    ("Name a color of the sky.", "Wrong. I asked for a color, you ignored the question. Redo it."),
    ("Write a haiku about rain.", "Lovely, exactly what I wanted."),
    ("How many legs does a spider have?", "No. Spiders have eight legs, that answer is wrong."),
]


def probe(client: httpx.Client, url: str, i: int) -> float:
    body = {"model": "clawd", "stream": True, "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": f"Probe {i}: name one fruit and nothing else."}]}
    r = stream_chat(client, url + "/v1/chat/completions", body)
    return r["ttft_ms"] / 1000


def status(client: httpx.Client, url: str) -> dict:
    return client.get(url + "/v1/clawd/status").json()


def main() -> None:
    from clawd.config import bundled_model_path

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--probes", type=int, default=6)
    ap.add_argument("--threads", type=int, default=0, help="llama.cpp and torch threads; 0 = all cores (the default)")
    ap.add_argument("--max-train-tokens", type=int, default=512)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    model = args.model or bundled_model_path()
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="clawd-ttft-train-"))
    home = tmp / "home"
    idle_s = 2.0
    flags = ["--home", str(home), "--model", str(model), "--threads", str(args.threads), "--idle-seconds", str(idle_s),
             "--tick-seconds", "0.25", "--train-batch", str(len(CONVERSATIONS)), "--train-minibatch", "1",
             "--train-epochs", "50", "--judge-margin", "0", "--judge-hint-votes", "1",
             "--max-train-tokens", str(args.max_train_tokens)]
    print(f"model {model}; daemon log {tmp / 'clawd.log'}", flush=True)
    d = Daemon(home, *flags, log=tmp / "clawd.log", new_session=True).start()
    url = d.url
    client = httpx.Client(timeout=600)
    out: dict = {"model": str(model), "threads": args.threads, "max_train_tokens": args.max_train_tokens}
    try:
        probe(client, url, -1)  # warm-up
        idle = []
        for i in range(args.probes):
            time.sleep(idle_s + rng.random())
            idle.append(probe(client, url, i))
            print(f"  idle probe {i}: first token {idle[-1]:.3f} s", flush=True)

        for q, reaction in CONVERSATIONS:
            first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]
            a = client.post(url + "/v1/chat/completions", json={"model": "clawd", "messages": first, "max_tokens": 48,
                                                               "temperature": 0.7}).json()
            follow = first + [a["choices"][0]["message"], {"role": "user", "content": reaction}]
            client.post(url + "/v1/chat/completions", json={"model": "clawd", "messages": follow, "max_tokens": 8})
        print("conversations sent; waiting for the daemon to judge them and start training ...", flush=True)

        # Each probe waits for a micro-step to complete after the last pause (the trainer is really
        # computing again), then lands at a random point inside the next one.
        training, micro, last_step = [], [], None
        deadline = time.time() + 3600
        while len(training) < args.probes and time.time() < deadline:
            st = status(client, url)
            ev = st["training"]["progress"] or {}
            if ev.get("event") != "step" or ev["step"] == last_step or st["doing"] != "training":
                time.sleep(0.05)
                continue
            last_step = ev["step"]
            micro.append(ev["micro_step_s"])
            time.sleep(rng.uniform(0, ev["micro_step_s"]))
            t = probe(client, url, 100 + len(training))
            training.append(t)
            print(f"  probe {len(training) - 1} during training: first token {t:.3f} s "
                  f"(micro-step before it {micro[-1]:.2f} s)", flush=True)
        final = status(client, url)
    finally:
        d.stop()
        client.close()

    base = statistics.median(idle)
    added = [t - base for t in training]
    worst_micro = max(micro) if micro else None
    out |= {"idle_ttft_s": idle, "training_ttft_s": training, "micro_step_s": micro,
            "idle_median_s": base, "training_median_s": statistics.median(training) if training else None,
            "added_s": added, "max_added_s": max(added) if added else None, "max_micro_step_s": worst_micro,
            "mean_micro_step_s": statistics.mean(micro) if micro else None, "status": final}
    out["within_one_micro_step"] = (bool(training) and worst_micro is not None
                                    and sum(a <= worst_micro for a in added) / len(added))
    print(f"\nidle TTFT median {base:.3f} s (max {max(idle):.3f}); during training median "
          f"{out['training_median_s']:.3f} s, max {max(training):.3f} s")
    print(f"added over idle: median {statistics.median(added):.3f} s, max {max(added):.3f} s; "
          f"micro-step mean {out['mean_micro_step_s']:.2f} s, max {worst_micro:.2f} s")
    print(f"probes within one micro-step of idle: {out['within_one_micro_step']:.0%}; "
          f"max added / max micro-step = {max(added) / worst_micro:.2f}")
    write_result("ttft_training", out)


if __name__ == "__main__":
    main()
