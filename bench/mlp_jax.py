#!/usr/bin/env python3
"""bench/mlp.h's training step under XLA:CPU (jax.jit), the peer of kiln's MLPStep in issue 17:
784-512-512-10 ReLU MLP (weights [in, out], PyTorch-style uniform init, zero biases), mean softmax
cross-entropy (max-shifted log-sum-exp), SGD with lr 0.01, no momentum. One jitted function does
forward, backward and the update, with the parameters donated so that XLA updates them in place
(its best configuration). Prints, per batch size, the first call (trace, XLA compile and one step)
and the median of the timed steps (each waits for the loss with block_until_ready, as kiln's step
returns a computed loss).

Benchmark only: JAX is not a kiln dependency. Install it in a virtual environment from PyPI:

    python3 -m venv /tmp/jaxenv && /tmp/jaxenv/bin/pip install 'jax[cpu]'
    taskset -c 0 /tmp/jaxenv/bin/python bench/mlp_jax.py --threads 1      # one core
    taskset -c 0,1 /tmp/jaxenv/bin/python bench/mlp_jax.py --threads 2    # both cores

kiln's figures for the same steps: `kiln_bench --benchmark_filter='^MLPStep/(1|128|1024)/kiln'`.
"""
import argparse
import os
import statistics
import sys
import time


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1, help="XLA's intra-op threads (1: Eigen's pool off)")
    ap.add_argument("--batches", default="1,128,1024", help="comma-separated batch sizes")
    ap.add_argument("--seconds", type=float, default=2.0, help="timed seconds per batch size")
    return ap.parse_args()


def main():
    a = parse()
    # XLA reads its flags when the backend starts: set them before importing jax.
    flags = os.environ.get("XLA_FLAGS", "")
    if a.threads == 1:
        flags += " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    os.environ["XLA_FLAGS"] = flags.strip()
    import jax
    import jax.numpy as jnp

    sizes = (784, 512, 512, 10)

    def init(key):
        params = []
        for l in range(3):
            key, sub = jax.random.split(key)
            bound = 1.0 / (sizes[l] ** 0.5)
            w = jax.random.uniform(sub, (sizes[l], sizes[l + 1]), jnp.float32, -bound, bound)
            params += [w, jnp.zeros((sizes[l + 1],), jnp.float32)]
        return params

    def loss_fn(params, x, labels):
        h = x
        for l in range(3):
            h = h @ params[2 * l] + params[2 * l + 1]
            if l < 2:
                h = jax.nn.relu(h)
        m = jax.lax.stop_gradient(h.max(axis=1, keepdims=True))
        lse = jnp.log(jnp.exp(h - m).sum(axis=1, keepdims=True)) + m
        onehot = (labels[:, None] == jnp.arange(10)[None, :]).astype(jnp.float32)
        return (lse - (onehot * h).sum(axis=1, keepdims=True)).mean()

    def step(params, x, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, labels)
        return [p - 0.01 * g for p, g in zip(params, grads)], loss

    jstep = jax.jit(step, donate_argnums=0)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, XLA_FLAGS='{os.environ['XLA_FLAGS']}'")
    for batch in (int(b) for b in a.batches.split(",")):
        key = jax.random.PRNGKey(7)
        params = init(key)
        x = jax.random.normal(jax.random.PRNGKey(11), (batch, 784), jnp.float32)
        labels = jax.random.randint(jax.random.PRNGKey(12), (batch,), 0, 10)
        t0 = time.perf_counter()
        params, loss = jstep(params, x, labels)
        loss.block_until_ready()
        first_ms = (time.perf_counter() - t0) * 1e3
        for _ in range(3):
            params, loss = jstep(params, x, labels)
        loss.block_until_ready()
        times = []
        end = time.perf_counter() + a.seconds
        while time.perf_counter() < end:
            t = time.perf_counter()
            params, loss = jstep(params, x, labels)
            loss.block_until_ready()
            times.append(time.perf_counter() - t)
        med = statistics.median(times) * 1e3
        print(f"MLPStep/{batch}/xla/threads:{a.threads}: {med:.4f} ms median of {len(times)} steps "
              f"(first call {first_ms:.1f} ms), loss {float(loss):.4f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
