import json
import struct

import pytest

from papershelf.errors import InputError
from papershelf.hf_folder import check_config_fits_weights, estimated_parameters, safetensors_shapes

CONFIG = {"hidden_size": 8, "num_hidden_layers": 2, "vocab_size": 16, "intermediate_size": 12}


def _folder(tmp_path, config=CONFIG, layers=2, header=None):
    """A model folder with a header-only safetensors file (the data bytes are never read)."""
    tensors = {"model.embed_tokens.weight": [16, 8]}
    for i in range(layers):
        tensors[f"model.layers.{i}.self_attn.q_proj.weight"] = [8, 8]
        tensors[f"model.layers.{i}.mlp.gate_proj.weight"] = [12, 8]
    offset, entries = 0, {}
    for name, shape in tensors.items():
        size = 4 * shape[0] * shape[1]
        entries[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(entries).encode() if header is None else header
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)
    (tmp_path / "config.json").write_text(json.dumps(config) if isinstance(config, dict) else config)
    return tmp_path


def test_a_matching_folder_passes_and_shapes_come_from_the_header(tmp_path):
    folder = _folder(tmp_path)
    check_config_fits_weights(folder)
    assert safetensors_shapes(folder)["model.layers.1.mlp.gate_proj.weight"] == (12, 8)


def test_more_layers_than_the_weights_hold_is_refused_before_any_allocation(tmp_path):
    folder = _folder(tmp_path, {**CONFIG, "num_hidden_layers": 10**9})
    with pytest.raises(InputError, match=r"num_hidden_layers = 1000000000.*2 layers"):
        check_config_fits_weights(folder)


def test_a_config_far_larger_than_its_weights_is_refused(tmp_path):
    folder = _folder(tmp_path, {**CONFIG, "hidden_size": 100_000})
    with pytest.raises(InputError, match="does not belong to these weights"):
        check_config_fits_weights(folder)


@pytest.mark.parametrize("bad", ["x", -1, 0, None, True, 1.5])
def test_non_integer_sizes_are_refused(tmp_path, bad):
    folder = _folder(tmp_path, {**CONFIG, "vocab_size": bad} if bad is not None else {**CONFIG})
    if bad is None:  # an absent key is not an error: the check cannot tell, from_pretrained will
        check_config_fits_weights(folder)
        return
    with pytest.raises(InputError, match="vocab_size must be a positive integer"):
        check_config_fits_weights(folder)


@pytest.mark.parametrize("config", ["{ not json", "[1, 2]", b"\xff\xfe"])
def test_unreadable_configs_are_one_error(tmp_path, config):
    folder = _folder(tmp_path)
    path = folder / "config.json"
    path.write_bytes(config) if isinstance(config, bytes) else path.write_text(config)
    with pytest.raises(InputError, match=r"config\.json"):
        check_config_fits_weights(folder)


def test_corrupt_and_missing_weights_are_one_error(tmp_path):
    folder = _folder(tmp_path, header=b"{not json")
    with pytest.raises(InputError, match="not a readable safetensors file"):
        check_config_fits_weights(folder)
    (folder / "model.safetensors").write_bytes(b"\x01")
    with pytest.raises(InputError, match="not a readable safetensors file"):
        check_config_fits_weights(folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(InputError, match=r"no model\.safetensors"):
        check_config_fits_weights(folder)


def test_extra_weight_layers_and_unknown_configs_pass(tmp_path):
    check_config_fits_weights(_folder(tmp_path, layers=3))  # e.g. a multi-token-prediction layer
    assert estimated_parameters({"d_model": 8}) is None


def test_model_folder_takes_a_folder_or_a_testbed_name(tmp_path):
    from papershelf.hf_folder import model_folder

    assert model_folder(str(tmp_path)) == tmp_path
    with pytest.raises(InputError, match=r"^--model 'tiny-q' is not a folder"):
        model_folder("tiny-q")
    with pytest.raises(InputError, match=r"^--base "):
        model_folder(str(tmp_path / "none"), flag="--base")
    lm = pytest.importorskip("papershelf_lm.model")
    assert model_folder("tiny-s") == lm.CHECKPOINTS / "tiny-s"
