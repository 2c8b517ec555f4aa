"""What the start-up checks' tests share: a reward file of the user's own."""


def reward_file(
    tmp_path, body="def my_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"
):
    path = tmp_path / "my_reward.py"
    path.write_text(body)
    return path
