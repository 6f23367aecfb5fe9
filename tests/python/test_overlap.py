"""The documented loops that overlap the policy with the envs (docs/ASYNC.md, docs/TORCHRL.md) run
and give each env the trajectory that stepping every env with the same policy gives; TorchRL's
MultiAsyncCollector on ringenv envs yields whole trajectories of its policy."""

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

DOCS = Path(__file__).resolve().parents[2] / "docs"


def snippet(page: str, heading: str, index: int = 0) -> str:
    """The ``index``-th Python block under ``heading`` in ``docs/<page>``."""
    text = (DOCS / page).read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)[index]


def run(page: str, heading: str, index: int = 0) -> dict:
    namespace: dict = {"__name__": "docs_snippet"}
    exec(compile(snippet(page, heading, index), f"docs/{page}", "exec"), namespace)
    return namespace


def stepped_every_env(act, num_envs: int, steps: int):
    """Observations and rewards ``(steps, num_envs, ...)`` of Gymnasium's ``SyncVectorEnv`` of
    CartPole-v1 reset with ``seed=0``, stepped with ``act(obs) -> actions``: row ``k`` is the
    observation the ``k``-th action is taken on and the reward that came with it (0 at a reset)."""
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * num_envs)
    obs, _ = envs.reset(seed=0)
    observations, rewards = [obs], [np.zeros(num_envs)]
    for _ in range(steps - 1):
        obs, reward, _, _, _ = envs.step(act(obs))
        observations.append(obs)
        rewards.append(reward)
    envs.close()
    return np.stack(observations), np.stack(rewards)


def test_the_async_page_loop_gives_every_env_its_stepped_trajectory():
    ns = run("ASYNC.md", "Overlap the policy with the envs")
    steps, num_envs = ns["steps"], ns["num_envs"]
    assert ns["envs"].batch_size == num_envs // 2 and ns["envs"].closed
    with torch.inference_mode():
        expected_obs, expected_rewards = stepped_every_env(
            lambda obs: ns["policy"](torch.from_numpy(obs)).argmax(1).numpy(), num_envs, steps)
    assert ns["t"].min() >= steps
    np.testing.assert_array_equal(ns["observations"], expected_obs)
    np.testing.assert_array_equal(ns["rewards"], expected_rewards)
    assert (expected_rewards == 0).sum() > num_envs, "no episode ended: the autoreset rows went unchecked"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_torchrl_page_multi_async_collector_yields_whole_trajectories_of_its_policy():
    ns = run("TORCHRL.md", "Overlapping the policy with the envs", 0)
    batches, net = ns["batches"], ns["net"]
    assert [tuple(b.batch_size) for b in batches] == [(8, 32)] * 4
    ends = 0
    for batch in batches:
        obs, done = batch["observation"], batch["next", "done"].squeeze(-1)
        with torch.inference_mode():
            greedy = net(obs).argmax(-1)
        np.testing.assert_array_equal(batch["action"].argmax(-1).numpy(), greedy.numpy())
        assert (batch["action"].sum(-1) == 1).all(), "actions are one-hot"
        # Within a batch each row is one env's consecutive steps: the next observation is the
        # next row's observation, except after an episode end (then the next row is a reset).
        going_on = ~done[:, :-1]
        np.testing.assert_array_equal(batch["next", "observation"][:, :-1][going_on].numpy(),
                                      obs[:, 1:][going_on].numpy())
        ends += int(done.sum())
    assert ends > 0, "no episode ended: the rows after a reset went unchecked"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_torchrl_page_loop_gives_every_env_its_stepped_trajectory():
    ns = run("TORCHRL.md", "Overlapping the policy with the envs", 1)
    data, net = ns["data"], ns["net"]
    assert data.batch_size == (400,) and ns["envs"].closed
    env_id = data["env_id"].numpy()
    counts = np.bincount(env_id, minlength=8)
    assert counts.sum() == 400 and counts.min() > 0
    with torch.inference_mode():
        expected, _ = stepped_every_env(lambda obs: net(torch.from_numpy(obs)).argmax(-1).numpy(), 8,
                                        int(counts.max()))
    for i in range(8):
        np.testing.assert_array_equal(data["observation"].numpy()[env_id == i], expected[:counts[i], i])
    np.testing.assert_array_equal(data["action"].numpy(), net(data["observation"]).argmax(-1).detach().numpy())
