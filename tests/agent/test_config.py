"""Settings precedence: flags > environment > config file > defaults."""

import pytest

from collectors.config import AgentConfig, ConfigError, load_config


def test_precedence(tmp_path):
    toml = tmp_path / "agent.toml"
    toml.write_text(
        'server = "http://file"\ntoken = "file-token"\ninterval = 2.0\nbatch_seconds = 30\n'
        'spool = "/tmp/file.db"\n'
    )
    env = {"GREENOPS_TOKEN": "env-token", "GREENOPS_INTERVAL": "0.5", "GREENOPS_SIMULATE": "3"}
    flags = {"interval": 0.25, "server": None}
    config = load_config(flags, env, str(toml))
    assert config.server == "http://file"  # file only
    assert config.token == "env-token"  # env beats file
    assert config.interval == 0.25  # flag beats env
    assert config.batch_seconds == 30.0  # file beats default
    assert config.simulate == 3
    assert config.flush_timeout == AgentConfig.flush_timeout  # default
    assert str(config.spool_path) == "/tmp/file.db"


def test_config_file_from_env(tmp_path):
    toml = tmp_path / "agent.toml"
    toml.write_text('server = "http://from-env-file"\n')
    config = load_config({}, {"GREENOPS_CONFIG": str(toml)})
    assert config.server == "http://from-env-file"


@pytest.mark.parametrize(
    "env, message",
    [
        ({"GREENOPS_INTERVAL": "fast"}, "GREENOPS_INTERVAL: interval must be a float"),
        ({"GREENOPS_SIMULATE": "0"}, "simulate must be at least 1"),
        ({"GREENOPS_BATCH_SECONDS": "0"}, "must be positive"),
    ],
)
def test_bad_values_are_config_errors(tmp_path, env, message):
    with pytest.raises(ConfigError, match=message):
        load_config({}, {**env, "GREENOPS_CONFIG": str(_empty(tmp_path))})


def test_unknown_key_and_missing_file(tmp_path):
    toml = tmp_path / "agent.toml"
    toml.write_text("sever = 'typo'\n")
    with pytest.raises(ConfigError, match="unknown setting"):
        load_config({}, {}, str(toml))
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config({}, {}, str(tmp_path / "missing.toml"))


def test_require_server_and_token(tmp_path):
    with pytest.raises(ConfigError, match="no token"):
        AgentConfig(server="http://x").require_server()
    with pytest.raises(ConfigError, match="must start with http"):
        AgentConfig(server="x", token="t").require_server()


def _empty(tmp_path):
    path = tmp_path / "empty.toml"
    path.write_text("")
    return path
