"""``AsyncVectorEnv(device=...)``: results as torch tensors on a GPU (checked where one exists,
skipped with the reason elsewhere), actions as torch tensors, and a clear error before any worker
starts where CUDA cannot be used."""

from __future__ import annotations

import functools

import gymnasium as gym
from gymnasium import spaces
import numpy as np
import pytest
from helper_envs import ColourSpace, JitterEnv, SpaceEnv, TreeEnv
from staging_stand_in import HostStaging
from vec_asserts import assert_tree_identical, child_pids

from ringenv import AsyncVectorEnv, make_vec
from ringenv._slots import leaf_spaces, tree_leaves, tree_of
from ringenv._staging import parse_device
from ringenv.errors import CudaUnavailableError

torch = pytest.importorskip("torch", reason="torch is part of the test set-up (pip install .[test])")


def cartpoles(n=4):
    return [lambda: gym.make("CartPole-v1")] * n


def test_device_cpu_returns_numpy_and_cuda_without_a_gpu_fails_before_any_worker_starts(closing):
    env = closing(AsyncVectorEnv(cartpoles(), num_workers=2, device="cpu"))
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, np.ndarray)
    try:
        parse_device("cuda")
    except CudaUnavailableError:
        before = set(child_pids())
        with pytest.raises(CudaUnavailableError, match="device='cuda'"):
            AsyncVectorEnv(cartpoles(), num_workers=2, device="cuda")
        assert set(child_pids()) == before, "no worker may start when the device is refused"
    else:
        pytest.skip("a CUDA device is usable here: the refusal cannot occur (the GPU tests below run instead)")


def test_torch_cpu_tensor_actions_equal_numpy_actions(closing):
    ours = closing(AsyncVectorEnv(cartpoles(), num_workers=2))
    ref = closing(AsyncVectorEnv(cartpoles(), num_workers=2))
    np.testing.assert_array_equal(ours.reset(seed=3)[0], ref.reset(seed=3)[0])
    for t in range(50):
        actions = np.array([(t + i) % 2 for i in range(4)])
        a, b = ours.step(torch.from_numpy(actions)), ref.step(actions)
        for x, y in zip(a[:4], b[:4]):
            np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match="must be integers"):
        ours.step(torch.zeros(4, dtype=torch.float32))


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
def test_torch_actions_of_a_dtype_numpy_lacks_reach_the_envs_as_their_float32_values(closing, dtype):
    """bfloat16 and float8 tensors (a policy in reduced precision) have no NumPy dtype: they are
    widened to float32, which holds their values exactly, and the envs get what the float32
    tensor of the same values gives them (before: torch's ``TypeError: Got unsupported
    ScalarType BFloat16``)."""
    if not hasattr(torch, dtype):
        pytest.skip(f"this torch has no torch.{dtype}")
    pendulum = [functools.partial(gym.make, "Pendulum-v1")] * 2
    ours, ref = closing(AsyncVectorEnv(pendulum, num_workers=2)), closing(AsyncVectorEnv(pendulum, num_workers=2))
    ours.reset(seed=1), ref.reset(seed=1)
    actions = torch.tensor([[0.5], [-1.25]]).to(getattr(torch, dtype))
    got, want = ours.step(actions), ref.step(actions.to(torch.float32))
    for x, y in zip(got[:4], want[:4]):
        np.testing.assert_array_equal(x, y)


def test_torch_actions_on_the_meta_device_are_refused_by_name(closing):
    env = closing(AsyncVectorEnv(cartpoles(2), num_workers=2))
    env.reset(seed=0)
    with pytest.raises(ValueError, match="meta device"):
        env.step(torch.zeros(2, dtype=torch.int64, device="meta"))
    assert env.step(np.zeros(2, np.int64))[1].shape == (2,)


def test_torch_cpu_tensor_actions_in_send(closing):
    env = closing(AsyncVectorEnv([JitterEnv] * 4, num_workers=2, batch_size=2))
    env.async_reset(seed=0)
    last = {}  # env id -> the action sent to it last
    for t in range(20):
        obs, _, _, _, infos = env.recv(timeout=30)
        for row, i in zip(obs, infos["env_id"]):
            if int(i) in last and row[1] > 0:  # not a reset observation: it shows the action taken
                assert row[2] == last[int(i)], (t, int(i))
        env.send(torch.full((2,), t % 4, dtype=torch.int64), infos["env_id"])
        last.update({int(i): t % 4 for i in infos["env_id"]})
    assert len(last) == 4


def test_device_leaves_and_observation_tree_are_inverse_in_the_spaces_order(closing):
    """What DeviceBatches stages (a slot's leaves) and how it puts the tensors back: the same
    arrays, in the space's dicts and tuples (the order of both walks must agree)."""
    env = closing(AsyncVectorEnv([TreeEnv] * 4, num_workers=2))
    obs, _ = env.reset(seed=1)
    slots, slot = env._slots, env._slots.latest[0]
    leaves = slots.device_leaves(slot)
    assert len(leaves) == 4 and all(leaf.shape[0] == 4 for leaf in leaves)
    tree = slots.observation_tree([leaf.copy() for leaf in leaves])
    assert_tree_identical(tree, obs)
    flat = closing(AsyncVectorEnv(cartpoles(2), num_workers=1))
    flat.reset(seed=0)
    (only,) = flat._slots.device_leaves(0)
    assert flat._slots.observation_tree([only]) is only


def test_tree_of_puts_leaves_back_in_the_spaces_order_and_counts_them():
    """``tree_leaves`` and ``tree_of`` (what the Ray device path stages by) walk a nested space in
    one order, and a wrong number of leaves is a ValueError naming both counts, not a silently
    short or truncated tree."""
    space = TreeEnv().observation_space
    # Gymnasium's Dict lists its keys sorted: frame, inner (a Tuple), pos
    assert [type(s).__name__ for s in leaf_spaces(space)] == ["Box", "Box", "MultiBinary", "Discrete"]
    value = space.sample()
    leaves = tree_leaves(space, value)
    assert [leaf is v for leaf, v in zip(leaves, (value["frame"], *value["inner"], value["pos"]))] == [True] * 4
    assert_tree_identical(tree_of(space, leaves), value)
    for wrong in (leaves[:3], leaves + [leaves[0]]):
        with pytest.raises(ValueError, match=f"{len(wrong)} leaves for a space of 4"):
            tree_of(space, wrong)
    box = spaces.Box(0, 1, (2,))
    assert leaf_spaces(box) == [box] and tree_of(box, ["x"]) == "x"


@pytest.fixture
def host_staging(monkeypatch):
    """``device="cuda"`` accepted by a local vector env and staged by :class:`HostStaging`."""
    import ringenv._staging
    import ringenv.vector

    monkeypatch.setattr(ringenv.vector, "parse_device", lambda d: "stand-in" if d == "cuda" else parse_device(d))
    monkeypatch.setattr(ringenv._staging, "GpuStaging", HostStaging)
    HostStaging.made = []
    return HostStaging.made


@pytest.mark.parametrize("copy", [True, False])
def test_dict_device_path_with_a_host_staging(closing, host_staging, copy):
    """The vector env's side of ``device="cuda"`` for a nested Dict/Tuple space, on any machine:
    each slot's leaves then reward and the flags are staged (one array each, in the space's
    order), and the batches come back as the space's dicts and tuples of tensors equal to the
    CPU results, across episode ends (``step``: the slot's reused tensors without ``copy``, new
    ones with it) and in asynchronous batches (rows of several workers: new tensors)."""
    ours = closing(AsyncVectorEnv([TreeEnv] * 4, num_workers=2, device="cuda", copy=copy))
    ref = closing(AsyncVectorEnv([TreeEnv] * 4, num_workers=2))
    (staging,) = host_staging
    for arrays in staging.host:  # frame, inner (a Box and a MultiBinary), pos, then the columns
        assert [a.dtype for a in arrays] == [np.uint8, np.float32, np.int8, np.int64, np.float64, np.bool_, np.bool_]
    obs, _ = ours.reset(seed=5)
    assert isinstance(obs["frame"], torch.Tensor) and isinstance(obs["inner"], tuple)
    assert_tree_identical(_host(obs), ref.reset(seed=5)[0])
    for t in range(16):  # TreeEnv truncates every 7 steps
        actions = np.array([(t + i) % 3 for i in range(4)])
        got, want = ours.step(torch.from_numpy(actions)), ref.step(actions)
        assert_tree_identical(_host(got[0]), want[0])
        assert got[1].dtype == torch.float64 and got[3].dtype == torch.bool
        for x, y in zip(got[1:4], want[1:4]):
            np.testing.assert_array_equal(x.numpy(), y)
    staged = {entry[0] for entry in staging.log}
    assert staged == {"reuse", "stage_new" if copy else "stage"}, staging.log[:6]
    ours.close()
    assert staging.closed


def test_dict_device_path_in_asynchronous_batches_with_a_host_staging(closing, host_staging):
    """Asynchronous batches of a nested Dict/Tuple space on the device path (rows of several
    workers: new tensors): each env's results equal a CPU vector env's, env by env."""
    _assert_async_tree_runs_agree(closing, "cuda")
    assert {entry[0] for entry in host_staging[0].log} == {"reuse", "stage_new"}


#: MiniGrid's observation in form: arrays beside a custom value (ringenv._layout.observation_layout
#: splits it; the custom value stays on the host).
SPLIT = spaces.Dict({"image": spaces.Box(0, 255, (3, 3, 3), np.uint8), "mission": ColourSpace(),
                     "direction": spaces.Discrete(4)}, sort_keys=False)


@pytest.mark.parametrize("copy", [True, False])
def test_a_split_dicts_arrays_go_to_the_device_and_its_other_values_stay_on_the_host(closing, host_staging, copy):
    fns = [functools.partial(SpaceEnv, SPLIT) for _ in range(4)]
    ours = closing(AsyncVectorEnv(fns, device="cuda", copy=copy))
    ref = closing(gym.vector.SyncVectorEnv(fns))
    (staging,) = host_staging
    assert [a.dtype for a in staging.host[0]][:2] == [np.uint8, np.int64]  # image, direction, then the columns

    def check(got, want, what):
        assert list(got) == list(SPLIT.spaces), what
        assert isinstance(got["image"], torch.Tensor) and isinstance(got["direction"], torch.Tensor), what
        assert_tree_identical({k: v if k == "mission" else v.numpy() for k, v in got.items()}, want, what=what)

    check(ours.reset(seed=5)[0], ref.reset(seed=5)[0], "reset")
    for t in range(12):
        actions = np.array([(t + i) % 3 for i in range(4)])
        got, want = ours.step(actions), ref.step(actions)
        check(got[0], want[0], f"step {t}")
        np.testing.assert_array_equal(got[1].numpy(), want[1])


def test_a_split_dicts_asynchronous_batches_on_the_device(closing, host_staging):
    fns = [functools.partial(SpaceEnv, SPLIT) for _ in range(4)]
    ours = closing(AsyncVectorEnv(fns, num_workers=2, batch_size=2, deterministic=True, device="cuda"))
    ref = closing(AsyncVectorEnv(fns, num_workers=2, batch_size=2, deterministic=True))
    ours.async_reset(seed=7)
    ref.async_reset(seed=7)
    for r in range(16):
        got, want = ours.recv(), ref.recv()
        np.testing.assert_array_equal(got[4]["env_id"], want[4]["env_id"])
        assert got[0]["mission"] == want[0]["mission"]
        for key in ("image", "direction"):
            assert isinstance(got[0][key], torch.Tensor)
            np.testing.assert_array_equal(got[0][key].numpy(), want[0][key])
        actions = np.array([(r + i) % 3 for i in want[4]["env_id"]])
        ours.send(actions, got[4]["env_id"])
        ref.send(actions, want[4]["env_id"])


@pytest.mark.parametrize("space", [
    spaces.Dict({"word": spaces.Text(4), "mission": ColourSpace()}),  # what is laid out is not arrays
    spaces.Box(-1.0, 1.0, (2,), np.longdouble),  # no torch dtype
    spaces.Dict({"x": spaces.Box(-1.0, 1.0, (2,), np.dtype(">f4")), "mission": ColourSpace()}),  # nor for this
    ColourSpace(),  # nothing laid out
], ids=["text-beside-custom", "longdouble", "big-endian", "custom"])
def test_the_device_is_refused_for_what_it_cannot_hold_before_any_worker_starts(host_staging, space):
    before = set(child_pids())
    with pytest.raises(ValueError, match="needs observations of arrays in shared memory"):
        AsyncVectorEnv([functools.partial(SpaceEnv, space)] * 2, device="cuda")
    assert set(child_pids()) == before and host_staging == []


# -- on a GPU ---------------------------------------------------------------------------------------


def test_step_on_cuda_equals_the_cpu_results_with_cuda_actions(cuda, closing):
    ours = closing(AsyncVectorEnv(cartpoles(8), num_workers=2, device=cuda))
    ref = closing(AsyncVectorEnv(cartpoles(8), num_workers=2))
    obs, _ = ours.reset(seed=1)
    assert obs.device == cuda and obs.dtype == torch.float32
    np.testing.assert_array_equal(obs.cpu().numpy(), ref.reset(seed=1)[0])
    for t in range(300):  # crosses episode ends (next-step autoreset)
        actions = torch.tensor([(t * 3 + i) // 2 % 2 for i in range(8)], device=cuda)
        o, r, te, tr, _ = ours.step(actions)
        po, pr, pte, ptr, _ = ref.step(actions.cpu().numpy())
        assert (r.dtype, te.dtype, tr.dtype) == (torch.float64, torch.bool, torch.bool)
        for x, y in ((o, po), (r, pr), (te, pte), (tr, ptr)):
            assert x.device == cuda
            np.testing.assert_array_equal(x.cpu().numpy(), y, err_msg=f"step {t}")


def test_recv_on_cuda_equals_the_cpu_results(cuda, closing):
    def run(device):
        env = closing(AsyncVectorEnv([JitterEnv] * 8, num_workers=4, batch_size=4, deterministic=True,
                                     device=device))
        env.async_reset(seed=5)
        out = []
        for t in range(60):
            obs, rewards, terminated, truncated, infos = env.recv(timeout=30)
            ids = infos["env_id"]
            host = [x.cpu().numpy() if device else x for x in (obs, rewards, terminated, truncated)]
            out.append((ids.tolist(), *[h.tolist() for h in host]))
            env.send(np.arange(4) % 4, ids)
        return out

    assert run(cuda) == run(None)


def test_staged_tensors_are_ordered_on_the_callers_stream(cuda, closing):
    env = closing(AsyncVectorEnv(cartpoles(4), num_workers=2, device=cuda, copy=True))
    side = torch.cuda.Stream(cuda)
    with torch.cuda.stream(side):
        obs, _ = env.reset(seed=2)
        total = obs.sum()  # enqueued on `side` after the copy: must see the copied values
    side.synchronize()
    ref = closing(AsyncVectorEnv(cartpoles(4), num_workers=2))
    assert float(total) == pytest.approx(float(ref.reset(seed=2)[0].sum()))


def test_device_needs_observations_of_arrays_in_shared_memory(cuda):
    class TextInDict(gym.Env):
        observation_space = gym.spaces.Dict({"a": gym.spaces.Discrete(2), "name": gym.spaces.Text(8)})
        action_space = gym.spaces.Discrete(2)

    before = set(child_pids())
    with pytest.raises(ValueError, match="needs observations of arrays in shared memory"):
        AsyncVectorEnv([TextInDict] * 2, device=cuda)
    with pytest.raises(ValueError, match="with shared_memory=False"):
        AsyncVectorEnv(cartpoles(2), device=cuda, shared_memory=False)
    assert set(child_pids()) == before, "no worker may start when the device is refused"


def _host(tree):
    """A batch of tensors (in dicts and tuples) as NumPy arrays in the same containers."""
    if isinstance(tree, dict):
        return {k: _host(v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_host(v) for v in tree)
    return tree.cpu().numpy()


def _assert_tree_on(tree, device):
    if isinstance(tree, dict):
        return [_assert_tree_on(v, device) for v in tree.values()]
    if isinstance(tree, tuple):
        return [_assert_tree_on(v, device) for v in tree]
    assert isinstance(tree, torch.Tensor) and tree.device == device, tree


@pytest.mark.parametrize("copy", [True, False])
def test_dict_and_tuple_observations_on_cuda_equal_the_cpu_results(cuda, closing, copy):
    """A nested Dict/Tuple of Box, Discrete and MultiBinary leaves: the same dicts and tuples of
    tensors on the GPU, each leaf's dtype and values those of the CPU batch, across episode ends."""
    ours = closing(AsyncVectorEnv([TreeEnv] * 6, num_workers=3, device=cuda, copy=copy))
    ref = closing(AsyncVectorEnv([TreeEnv] * 6, num_workers=3))
    obs, _ = ours.reset(seed=4)
    _assert_tree_on(obs, cuda)
    assert_tree_identical(_host(obs), ref.reset(seed=4)[0])
    for t in range(20):  # episodes of 7 steps: autoresets
        actions = np.array([(t + i) % 3 for i in range(6)])
        o, r, te, tr, _ = ours.step(torch.from_numpy(actions).to(cuda))
        po, pr, pte, ptr, _ = ref.step(actions)
        _assert_tree_on(o, cuda)
        assert_tree_identical(_host(o), po)
        for x, y in ((r, pr), (te, pte), (tr, ptr)):
            np.testing.assert_array_equal(x.cpu().numpy(), y, err_msg=f"step {t}")


def _assert_async_tree_runs_agree(closing, device):
    """8 TreeEnvs in asynchronous batches of 4 on ``device`` and on the CPU: each env's sequence
    of observations and rewards is the same, as far as both ran it (the order of batches may
    differ between runs; each env's action comes from its own history alone)."""
    def run(device):
        env = closing(AsyncVectorEnv([TreeEnv] * 8, num_workers=4, batch_size=4, device=device))
        env.async_reset(seed=6)
        out = {}
        for t in range(40):
            obs, rewards, _, _, infos = env.recv(timeout=30)
            ids = infos["env_id"]
            host = _host(obs) if device else obs
            for k, i in enumerate(ids.tolist()):  # per env: the order of batches may differ
                row = {key: host[key][k].tolist() for key in ("frame", "pos")}
                row["inner"] = [leaf[k].tolist() for leaf in host["inner"]]
                out.setdefault(i, []).append((row, float(rewards[k])))
            # Each env's action from its own history alone: batches group envs differently per run.
            env.send(np.array([(len(out[int(i)]) + int(i)) % 3 for i in ids]), ids)
        return out

    ours, ref = run(device), run(None)
    # Which envs a run's batches held depends on how its workers were scheduled (on a busy machine
    # one worker may deliver no batch of the 40): the envs both runs stepped are compared.
    both = sorted(ours.keys() & ref.keys())
    assert both, (ours.keys(), ref.keys())
    for i in both:  # each env's sequence of results, as far as both ran it
        n = min(len(ours[i]), len(ref[i]))
        assert n > 0 and ours[i][:n] == ref[i][:n], i


def test_dict_observations_of_asynchronous_batches_on_cuda_equal_the_cpu_results(cuda, closing):
    _assert_async_tree_runs_agree(closing, cuda)


def test_rust_env_batches_on_cuda(cuda, closing):
    env = closing(make_vec("CartPole-v1", num_envs=8, vector_kwargs={"device": cuda}))
    obs, _ = env.reset(seed=0)
    assert obs.device == cuda and obs.shape == (8, 4)
    _, rewards, _, _, _ = env.step(torch.zeros(8, dtype=torch.int64, device=cuda))
    assert rewards.dtype == torch.float64 and bool((rewards == 1).all())


def test_batches_of_several_pieces_and_copies_are_new_tensors_holding_the_rows(cuda, closing):
    """DeviceBatches.batch over rows of several workers, in two slots, and with copy=True: new
    tensors (not the reused staging buffers), holding exactly the host rows asked for, in order."""
    env = closing(AsyncVectorEnv(cartpoles(8), num_workers=4, device=cuda))
    env.reset(seed=3)
    env.step(torch.ones(8, dtype=torch.int64, device=cuda))
    slots = env._slots
    device = slots.device
    for pieces in ([(0, 4, 6), (0, 0, 2)], [(1, 2, 4), (0, 6, 8), (1, 0, 1)], [(1, 0, 8)]):
        for copy in (True, False):
            obs, reward, terminated, truncated = device.batch(pieces, copy)
            torch.cuda.synchronize()
            want = [np.concatenate([a[s][start:stop] for s, start, stop in pieces])
                    for a in (slots.obs_flat, slots.reward, slots.terminated, slots.truncated)]
            assert (reward.dtype, terminated.dtype, truncated.dtype) == (torch.float64, torch.bool, torch.bool)
            for got, host in zip((obs, reward, terminated, truncated), want):
                assert got.device == cuda
                np.testing.assert_array_equal(got.cpu().numpy(), host.astype(got.cpu().numpy().dtype),
                                              err_msg=f"{pieces} copy={copy}")
            reused = {t.data_ptr() for out in device.staging._out for t in out}
            if copy or len(pieces) > 1:
                assert not {obs.data_ptr(), terminated.data_ptr(), truncated.data_ptr()} & reused, pieces
