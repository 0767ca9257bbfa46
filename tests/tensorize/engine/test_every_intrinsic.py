"""Every suite kernel tensorizes with every intrinsic whose dtypes fit it, and computes what
the untouched kernel computes."""

from __future__ import annotations

import pytest

from intrinsics import default_registry
from tensorize.engine import auto_tensorize, candidate_intrinsics
from tensorize.match import match_block
from tensorize.schedule import tree
from tests.tensorize.engine.suite import suite
from tests.tensorize.engine.test_auto import assert_computes_the_same


def _pairs() -> list[tuple[str, str, str]]:
    registry = default_registry()
    pairs = []
    for name, func in suite().items():
        for target in ("npu", "arm", "cuda"):
            for intrinsic in candidate_intrinsics(registry, target):
                # Hopper's warpgroup wgmma is built by tensorize.engine.cuda_hopper, not by
                # auto_tensorize's warp schedule (tests/targets/cuda/test_hopper.py).
                if "warpgroup" in intrinsic.params:
                    continue
                if any(isinstance(match_block(func, block, intrinsic, registry), list)
                       for block in tree.block_names(func)):
                    pairs.append((name, target, intrinsic.name))
    return pairs


PAIRS = _pairs()


def _params() -> list:
    """Every NPU pair, and the first kernel of each arm and cuda intrinsic, run by default;
    the other arm and cuda pairs with -m slow (CI runs both): test_auto and the backends'
    own tests (tests/targets/arm, tests/targets/cuda/test_mma.py) prove the suite through
    those families too, and the default run stays within its time."""
    seen: set[str] = set()
    params = []
    for pair in PAIRS:
        first = pair[2] not in seen
        seen.add(pair[2])
        params.append(pair if pair[1] == "npu" or first
                      else pytest.param(*pair, marks=pytest.mark.slow))
    return params


PARAMS = _params()


def test_every_dtype_family_is_covered():
    names = {intrinsic for _, _, intrinsic in PAIRS}
    assert {"npu_gemm", "arm_sdot", "arm_smmla", "arm_usmmla", "wmma_m16n16k16_s8_s32",
            "wmma_m32n8k16_s8_s32", "wmma_m16n16k16_f16_f32"} <= names


@pytest.mark.parametrize(("name", "target", "intrinsic"), PARAMS)
def test_kernel_tensorizes_with_the_intrinsic(name, target, intrinsic, registry, context):
    func = suite()[name]
    result = auto_tensorize(func, target, intrinsic=intrinsic, registry=registry,
                            config=context(target).machine)
    assert [b.intrinsic for b in result.tensorized][:1] == [intrinsic], \
        [b.reason for b in result.blocks]
    assert_computes_the_same(func, result.func)
