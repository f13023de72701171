"""The three ports of docs/howto/porting.md, run as the guide writes them (small sizes)."""

import math

import numpy as np
from numba import cuda, float32
from numba.cuda.random import create_xoroshiro128p_states, xoroshiro128p_uniform_float32

import numbatune as nt
from numbatune.testing import assert_variants_agree

RISKFREE, VOLATILITY = 0.02, 0.30
A1, A2, A3, A4, A5 = 0.31938153, -0.356563782, 1.781477937, -1.821255978, 1.330274429
RSQRT2PI = 0.39894228040143267793994605993438


@cuda.jit(device=True)
def cnd(d):
    K = 1.0 / (1.0 + 0.2316419 * math.fabs(d))
    ret = RSQRT2PI * math.exp(-0.5 * d * d) * (K * (A1 + K * (A2 + K * (A3 + K * (A4 + K * A5)))))
    return 1.0 - ret if d > 0 else ret


@nt.autotune(
    variants=nt.product(BLOCK=[8, 16, 32]),
    launch=lambda call, put, S, X, T, *, BLOCK: (nt.cdiv(S.shape[0], BLOCK), BLOCK),
)
@cuda.jit
def black_scholes(call, put, S, X, T):
    i = cuda.grid(1)
    if i >= S.shape[0]:
        return
    sqrt_t = math.sqrt(T[i])
    d1 = (math.log(S[i] / X[i]) + (RISKFREE + 0.5 * VOLATILITY * VOLATILITY) * T[i]) / (
        VOLATILITY * sqrt_t
    )
    d2 = d1 - VOLATILITY * sqrt_t
    exp_rt = math.exp(-RISKFREE * T[i])
    call[i] = S[i] * cnd(d1) - X[i] * exp_rt * cnd(d2)
    put[i] = X[i] * exp_rt * (1.0 - cnd(d2)) - S[i] * (1.0 - cnd(d1))


def test_black_scholes_block_size_is_a_launch_only_parameter():
    rng = np.random.default_rng(0)
    n = 50
    S, X, T = (cuda.to_device(rng.uniform(lo, hi, n)) for lo, hi in [(5, 30), (1, 100), (0.25, 10)])
    call, put = cuda.device_array(n), cuda.device_array(n)
    black_scholes(call, put, S, X, T)
    s, x, t = S.copy_to_host(), X.copy_to_host(), T.copy_to_host()
    # put-call parity: C - P = S - X e^{-rT}
    parity = call.copy_to_host() - put.copy_to_host() - (s - x * np.exp(-RISKFREE * t))
    np.testing.assert_allclose(parity, 0, atol=1e-6)
    assert_variants_agree(black_scholes, call, put, S, X, T)
    codes = {black_scholes._template.code_key(v) for v in black_scholes.variants}
    assert len(codes) == 1  # one kernel for every block size


@nt.autotune(
    variants=nt.product(BLOCK=[8, 16, 32]),
    launch=lambda states, inside, *, BLOCK: (nt.cdiv(inside.shape[0], BLOCK), BLOCK),
)
@cuda.jit
def darts(states, inside):
    i = cuda.grid(1)
    if i < inside.shape[0]:
        x = xoroshiro128p_uniform_float32(states, i)
        y = xoroshiro128p_uniform_float32(states, i)
        inside[i] = 1 if x * x + y * y <= 1.0 else 0


def test_monte_carlo_pi_from_record_rng_states():
    n = 256
    states = create_xoroshiro128p_states(n, seed=1)
    inside = cuda.device_array(n, np.int32)
    assert_variants_agree(darts, states, inside)
    darts(states, inside)
    assert abs(4 * inside.copy_to_host().mean() - math.pi) < 0.4


BLOCK = 16


@nt.autotune(
    variants=nt.product(BLOCK=[8, 16, 32]),
    launch=lambda x, partials, *, BLOCK: (nt.cdiv(x.shape[0], BLOCK), BLOCK),
    check=nt.Check(outputs=lambda x, partials: partials.sum()),
)
@cuda.jit
def block_sums(x, partials):
    shared = cuda.shared.array(BLOCK, float32)
    i = cuda.grid(1)
    shared[cuda.threadIdx.x] = x[i] if i < x.shape[0] else 0
    cuda.syncthreads()
    step = BLOCK // 2
    while step > 0:
        if cuda.threadIdx.x < step:
            shared[cuda.threadIdx.x] += shared[cuda.threadIdx.x + step]
        cuda.syncthreads()
        step //= 2
    if cuda.threadIdx.x == 0:
        partials[cuda.blockIdx.x] = shared[0]


def test_partial_sums_with_the_block_count_tuned():
    n = 100
    x = cuda.to_device(np.arange(n, dtype=np.float32))
    partials = cuda.to_device(np.zeros(nt.cdiv(n, 8), np.float32))
    block_sums(x, partials)
    blocks = nt.cdiv(n, block_sums.best(x, partials)["BLOCK"])
    assert partials.copy_to_host()[:blocks].sum() == np.arange(n).sum()
    assert block_sums.tune(x, partials).checked
