"""`tpujob plan --params N`: the Llama-shaped model of about N parameters (width a multiple of
128, a layer per 128 channels, 128-wide heads, a quarter of them key/value heads, MLP 3.5x the
width, vocab 32000), read through the CLI's request as a user's flags are; and the counts it
refuses, with the flag named."""

from argparse import Namespace

import pytest

from tpujob.planning import PlanError, PlanRequest


def _request(params: str, **flags) -> PlanRequest:
    args = Namespace(model=None, params=params, batch=None, seq=None, grad_accum=1,
                     remat="auto", optimizer="adamw", slices=1, machine_type=None,
                     containers_per_host=None, ici="", dcn="")
    for name, value in flags.items():
        setattr(args, name, value)
    return PlanRequest.from_cli(args)


# (what is asked, (d_model, n_layers, n_kv_heads, mlp_dim)); every row's heads are 128 wide.
@pytest.mark.parametrize(("params", "shape"), [
    ("7b", (4096, 32, 8, 14336)),           # Llama 3 8B's body (its vocab is 128256)
    ("7B", (4096, 32, 8, 14336)),
    ("8B", (4224, 33, 8, 14848)),
    ("8000m", (4224, 33, 8, 14848)),        # every suffix, and none, says the same count
    ("8000000k", (4224, 33, 8, 14848)),
    ("0.008t", (4224, 33, 8, 14848)),
    ("8000000000", (4224, 33, 8, 14848)),
    ("8e9", (4224, 33, 8, 14848)),
    (" 8 B ", (4224, 33, 8, 14848)),
    ("13B", (4992, 39, 9, 17536)),
    ("1.5e9", (2304, 18, 4, 8064)),
    ("350M", (1408, 11, 2, 4992)),
    ("1M", (128, 2, 1, 512)),                # the least counted: the smallest shape
    ("1e6", (128, 2, 1, 512)),
    ("10T", (46208, 361, 90, 161792)),       # the most counted
    ("1e13", (46208, 361, 90, 161792)),
])
def test_a_parameter_count_gives_the_nearest_llama_shape(params, shape):
    model = _request(params).model
    s = model.shape
    assert (s.d_model, s.n_layers, s.n_kv_heads, s.mlp_dim) == shape
    assert (s.head_dim, s.n_heads, s.vocab_size) == (128, s.d_model // 128, 32000)
    assert model.label == f"~{params}"


def test_the_shape_chosen_is_the_nearest_of_its_neighbours():
    """Around a count between two widths, the nearer one: each width's own count is the
    nearest to itself, and the midpoint between two goes to the smaller (the first found),
    a parameter past it to the larger."""
    small, large = _request("7b").model.shape, _request("8B").model.shape
    assert small.total_params < large.total_params
    assert _request(str(small.total_params)).model.shape == small
    assert _request(str(large.total_params)).model.shape == large
    middle = (small.total_params + large.total_params) // 2
    assert (small.total_params + large.total_params) % 2 == 0   # a tie: to the smaller
    assert _request(str(middle)).model.shape == small
    assert _request(str(middle - 1)).model.shape == small
    assert _request(str(middle + 1)).model.shape == large


def test_four_heads_share_one_key_value_head():
    """The width of 4 heads (512) is the first with fewer key/value heads than heads."""
    narrow = _request("1M").model.shape   # 128 wide: 1 head, its own key/value head
    shapes = [_request(str(n)).model.shape for n in (30e6, 40e6, 50e6, 60e6, 70e6)]
    by_width = {s.d_model: s for s in [narrow, *shapes]}
    assert by_width[128].n_kv_heads == 1
    assert 512 in by_width and by_width[512].n_heads == 4 and by_width[512].n_kv_heads == 1
    assert all(s.n_kv_heads == s.n_heads for s in by_width.values() if s.d_model < 512)


@pytest.mark.parametrize(("params", "message"), [
    ("lots", "expected a parameter count such as 8B, 350M or 1.5e9, got 'lots'"),
    ("8X", "expected a parameter count such as 8B, 350M or 1.5e9, got '8X'"),
    ("-8B", "expected a parameter count such as 8B, 350M or 1.5e9, got '-8B'"),
    ("999999", "a parameter count from 1M to 10T, got '999999'"),
    ("1k", "a parameter count from 1M to 10T, got '1k'"),
    ("10.1T", "a parameter count from 1M to 10T, got '10.1T'"),
    ("1e14", "a parameter count from 1M to 10T, got '1e14'"),
])
def test_a_count_out_of_reach_is_refused_naming_the_flag(params, message):
    with pytest.raises(PlanError) as err:
        _request(params)
    assert (err.value.field, str(err.value.message)) == ("--params", message)


@pytest.mark.parametrize("flag", ["batch", "seq", "grad_accum"])
def test_a_size_below_one_is_refused_naming_the_flag(flag):
    with pytest.raises(PlanError) as err:
        _request("1B", **{flag: 0})
    assert err.value.field == f"--{flag.replace('_', '-')}"
    assert "must be a positive whole number, got 0" in err.value.message
