"""The decode step's weights packed for oneDNN: the same text as the plain weights, used only inside the
decode step, never by a compiled graph, within a memory limit, and a model that packs still copies. On a CPU
whose oneDNN has no bfloat16 path (AVX2 only) nothing is packed and the plain products give the same text:
the tests that build packed copies themselves run where the CPU packs (test_cpu_bfloat16.py runs this file
with the CPU held to AVX2)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from oxygen_ros.engine import Engine, FrameInput, TextTask
from oxygen_ros.model.network.config import preset
from oxygen_ros.model.network.packed_decode import PackedLinear, can_pack, is_packed, packed_products, set_packed
from oxygen_ros.model.network.vla import Pi05Model

PACKS = can_pack(torch.zeros(1, dtype=torch.bfloat16))  # this CPU's oneDNN packs bfloat16 weights
needs_packing = pytest.mark.skipif(not PACKS, reason="oneDNN has no bfloat16 path on this CPU: the runtime packs nothing "
                                                      "here (the tests without this mark check that)")


def bf16_model(seed: int = 0) -> Pi05Model:
    torch.manual_seed(seed)
    return Pi05Model(preset("tiny")).to(torch.bfloat16).eval()


def frame(config, seed: int) -> FrameInput:  # noqa: ANN001
    g = torch.Generator().manual_seed(seed)
    s = config.vision.image_size
    images = torch.rand(config.num_image_slots, 3, s, s, generator=g) * 2 - 1
    tokens = torch.randint(4, config.vocab_size, (9,), generator=g)
    mask = torch.ones(config.num_image_slots, dtype=torch.bool)
    return FrameInput(images, mask, tokens, stamp_ns=seed, frame_seq=seed)


def decoded(pack: bool, steps: int = 6) -> tuple[list[list[int]], Engine]:
    model = bf16_model()
    task = TextTask("language", (5, 6, 7), every_n_frames=1, max_tokens=steps + 2)
    engine = Engine(model, [task], ignore_eos=True, pack_decode_weights=pack)
    for seed in range(3):  # three frames' requests decode together
        engine.tick(frame(model.config, seed))
    for _ in range(steps):
        engine.decode_step()
    return [r.generated for r in sorted(engine.kv.running(), key=lambda r: r.id)], engine


def test_packed_decode_steps_give_the_plain_steps_tokens() -> None:
    plain, plain_engine = decoded(pack=False)
    packed, engine = decoded(pack=True)
    assert plain_engine.packed_decode_bytes == 0 and (engine.packed_decode_bytes > 0) == PACKS
    assert len(packed) == 3 and all(len(tokens) >= 6 for tokens in packed)
    assert packed == plain


@needs_packing
def test_only_products_inside_the_decode_block_take_the_packed_copy() -> None:
    model = bf16_model()
    assert model.pack_decode_weights() > 0
    layer = next(m for m in model.layers[0].vlm.modules() if isinstance(m, PackedLinear))
    x = torch.randn(3, 1, layer.in_features).to(torch.bfloat16)
    plain = nn.functional.linear(x, layer.weight, layer.bias)
    with packed_products():
        torch.testing.assert_close(layer(x), plain)  # the same product (bit for bit on the CPUs measured)
    set_packed(layer, torch.zeros_like(layer.weight))  # a copy that gives itself away
    assert torch.equal(layer(x), plain)  # outside the block: the plain weight
    with packed_products():
        assert torch.count_nonzero(layer(x)) == 0  # inside: the packed copy
        compiled = torch.compile(lambda t: layer(t), backend="eager", fullgraph=True)
        assert torch.equal(compiled(x), plain)  # a traced graph keeps the plain weight


def test_nothing_is_packed_past_the_limit_in_float32_or_when_turned_off() -> None:
    model = bf16_model()
    assert model.pack_decode_weights(limit_bytes=1) == 0
    assert not any(is_packed(m) for m in model.modules())
    assert Engine(model, pack_decode_weights=False).packed_decode_bytes == 0
    torch.manual_seed(0)
    assert Engine(Pi05Model(preset("tiny")).eval()).packed_decode_bytes == 0  # float32: MKL's product, not packed
    added = Engine(model).packed_decode_bytes
    assert (added > 0) == PACKS and Engine(model).packed_decode_bytes == 0  # a second engine on the model adds nothing


@needs_packing
def test_a_packed_model_copies_with_its_state_dict_and_packs_again() -> None:
    model = bf16_model()
    keys = set(model.state_dict())
    assert model.pack_decode_weights() > 0
    assert set(model.state_dict()) == keys  # the packed copies are no buffers
    clone = copy.deepcopy(model)  # the packed copies stay with the model: the clone starts unpacked
    assert sum(is_packed(m) for m in model.modules()) > 1 and not any(is_packed(m) for m in clone.modules())
    assert clone.pack_decode_weights() > 0
    for a, b in zip(model.state_dict().values(), clone.state_dict().values()):
        assert torch.equal(a, b)


@needs_packing
def test_the_decode_floor_records_the_products_the_packed_step_runs() -> None:
    from oxygen_ros.bench.matmul_floor import MatmulFloor

    floors = {}
    for pack in (False, True):
        _, engine = decoded(pack, steps=1)
        floors[pack] = MatmulFloor.capture(engine.decode_step, torch.device("cpu"))
    plain, packed = floors[False], floors[True]
    # the same products either way (the packed layers' as oneDNN products), none of them lost to the recorder
    assert plain.packed == 0 and packed.packed > 0
    assert packed.count == plain.count and packed.flops == plain.flops > 0
    assert packed.time_once() > 0  # the packed weights are packed again for the replay
    # the text head's product alone, on the whole floor's own tensors (no second copy of the head)
    shape = tuple(engine.model.text_head_weight.shape)
    head = packed.part(lambda args: getattr(args[1], "shape", None) == shape)
    assert head.count == 1 and head.packed == 1 and head._calls[0][1][1] is next(
        args[1] for _, args in packed._calls if getattr(args[1], "shape", None) == shape)
    assert head.time_once() > 0


@pytest.mark.parametrize("choice", ["auto", "off"])
def test_the_runtime_packs_as_its_parameter_says(choice: str, caplog: pytest.LogCaptureFixture) -> None:
    from oxygen_ros.runtime.config import RuntimeConfig
    from oxygen_ros.runtime.policy import PolicyRuntime

    config = RuntimeConfig(model_preset="tiny", dtype="bfloat16", kv_budget_mb=16.0, num_threads=1,
                           pack_decode_weights=choice)
    with caplog.at_level("INFO", logger="oxygen_ros"):
        runtime = PolicyRuntime.load(config)
    packed = runtime.engine.packed_decode_bytes
    assert (packed > 0) == (choice == "auto" and PACKS)
    assert ("weights packed for oneDNN" in caplog.text) == (choice == "auto" and PACKS)
    path = "bfloat16 products in oneDNN" if PACKS else "plain bfloat16 products in torch's own kernels, nothing packed"
    assert path in caplog.text  # one line says which products run, and why
    with pytest.raises(ValueError, match="pack_decode_weights must be one of"):
        RuntimeConfig(pack_decode_weights="yes").validate()
