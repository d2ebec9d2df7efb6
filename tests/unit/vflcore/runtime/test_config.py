"""Config files: defaults, paths relative to the file, flags on top, and errors that name the key."""

from __future__ import annotations

import re
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any

import pytest

from vflcore.errors import ConfigError
from vflcore.job.distill import DistillSpec
from vflcore.job.document import job_from_document
from vflcore.job.privacy import PrivacySpec
from vflcore.job.spec import JobSpec
from vflcore.party_privacy import PartyPrivacy
from vflcore.runtime.config import (
    ClientConfig,
    ClientSettings,
    PartySettings,
    ServerSettings,
    client_config_from,
    load_toml,
    server_config_from,
)
from vflcore.settings import declared as declared_fields
from vflcore.settings import default_of, setting_key, table_keys
from vflserver.inference.config import RestLimits, ServingConfig, serving_config_from
from vflserver.plan.document import plan_from_document
from vflserver.plan.job_plan import JobPlan
from vfltesting.paths import REPO_ROOT as ROOT


class TestServerConfig:
    def test_example_config_loads(self) -> None:
        """The shipped example server.toml is valid and resolves paths against its own folder."""
        path = ROOT / "examples/configs/server.toml"
        config = server_config_from(load_toml(path), path)
        job = job_from_document(load_toml(path), path)
        assert job.algorithm == "splitnn" and job.passive_parties == (2, 3)
        assert config.data.path.resolve() == (ROOT / "examples/data/party1.csv").resolve()
        assert config.tls is not None and config.tls.ca.resolve() == (ROOT / "certs/ca.pem").resolve()

    def test_missing_data_path_names_the_key(self, tmp_path: Path) -> None:
        """Leaving out [data] path says which key is required."""
        with pytest.raises(ConfigError, match=r"\[data\] path is required"):
            server_config_from({}, tmp_path / "server.toml")

    @pytest.mark.parametrize(
        ("job", "message"),
        [
            ({"task": "ranking"}, "task"),
            ({"batch_size": 0}, "batch_size"),
            ({"test_fraction": 1.0}, "test_fraction"),
            ({"passive_parties": [1]}, "passive_parties"),
            ({"passive_parties": [2, 2]}, "twice"),
            ({"epochs": "ten"}, "epochs"),
            ({"weight_decay": -0.1}, r"\[job\] weight_decay = -0.1; give zero or a positive number"),
            ({"weight_decay": float("nan")}, "weight_decay"),
            ({"top_optimizer": "rmsprop"}, r"\[job\] top_optimizer = 'rmsprop'; choose one of"),
            ({"bottom_learning_rate": 0.0}, r"\[job\] bottom_learning_rate = 0; give a positive number"),
            ({"top_weight_decay": -1.0}, r"\[job\] top_weight_decay = -1; give zero or a positive number"),
            ({"bottom_weight_decay": "none"}, "bottom_weight_decay"),
            ({"validation_fraction": 1.0}, r"\[job\] validation_fraction = 1; give a share of the training rows"),
            ({"patience": -1}, r"\[job\] patience = -1; give a number of epochs"),
            ({"patience": 5}, r"\[job\] patience = 5 stops on the validation loss, but validation_fraction is 0"),
            ({"eval_every_rounds": -2}, r"\[job\] eval_every_rounds = -2; give a number of rounds"),
        ],
    )
    def test_bad_job_settings_are_refused(self, tmp_path: Path, job: dict[str, object], message: str) -> None:
        """Each impossible [job] setting is a ConfigError naming it."""
        with pytest.raises(ConfigError, match=message):
            job_from_document({"job": job}, tmp_path / "server.toml")

    def test_scores_inside_an_epoch_are_refused_where_the_server_trains_alone(self) -> None:
        """AdptVFedConv's phase 3 has no passive party in its steps to send the test rows' representation."""
        document = {"job": {"algorithm": "adptvfedconv", "eval_every_rounds": 10}}
        with pytest.raises(ConfigError, match=r"eval_every_rounds = 10: adptvfedconv scores the test rows only"):
            plan_from_document(document, default_join_timeout_s=1)
        document["job"]["algorithm"] = "async"
        assert plan_from_document(document, default_join_timeout_s=1).job.eval_every_rounds == 10

    def test_regularisers_are_read(self) -> None:
        """[job] weight_decay reaches the job every party gets; [model] top_dropout stays with the server."""
        plan = plan_from_document(
            {"job": {"weight_decay": 1e-4}, "model": {"top_dropout": 0.5}}, default_join_timeout_s=1
        )
        assert plan.job.weight_decay == 1e-4 and plan.top_dropout == 0.5
        defaults = plan_from_document({}, default_join_timeout_s=1)
        assert defaults.job.weight_decay == 0.0 and defaults.top_dropout == 0.0

    def test_each_role_may_have_an_optimizer_of_its_own(self, tmp_path: Path) -> None:
        """The VIM authors' settings: plain SGD for the top model and heads, SGD with momentum for the bottoms."""
        doc = {"job": {"optimizer": "sgd", "learning_rate": 0.1, "weight_decay": 1e-3, "top_optimizer": "plain_sgd"}}
        job = job_from_document(doc, tmp_path / "job.toml")
        assert job.optimizer_for("top") == ("plain_sgd", 0.1, 1e-3)
        assert job.optimizer_for("bottom") == ("sgd", 0.1, 1e-3)
        job = job_from_document({"job": {"bottom_learning_rate": 0.5, "top_weight_decay": 0.0}}, None)
        assert job.optimizer_for("bottom") == ("adam", 0.5, 0.0) and job.optimizer_for("top") == ("adam", 1e-3, 0.0)

    @pytest.mark.parametrize("rate", [1.0, -0.2])
    def test_top_dropout_out_of_range_is_refused(self, rate: float) -> None:
        """A dropout rate outside [0, 1) names the key and the range."""
        with pytest.raises(ConfigError, match=r"\[model\] top_dropout = .*in \[0, 1\)"):
            plan_from_document({"model": {"top_dropout": rate}}, default_join_timeout_s=1)

    def test_the_job_tables_are_not_read_with_the_config(self, tmp_path: Path) -> None:
        """A server config's [job] is read once, as every job is, when it is planned: not at load."""
        config = server_config_from({"data": {"path": "p.csv"}, "job": {"epochs": 0}}, tmp_path / "server.toml")
        assert not hasattr(config, "job")

    @pytest.mark.parametrize(
        ("key", "value"),
        [
            ("join_timeout_s", 0),
            ("step_timeout_s", -1),
            ("heartbeat_timeout_s", 0),
            ("max_rpcs", 0),
            ("torch_threads", 0),
        ],
    )
    def test_each_server_setting_is_checked(self, tmp_path: Path, key: str, value: int) -> None:
        """A timeout not above 0, or a count under 1, is a ConfigError naming the table and key."""
        with pytest.raises(ConfigError, match=rf"\[server\] {key} = "):
            server_config_from({"data": {"path": "p.csv"}, "server": {key: value}}, tmp_path / "server.toml")

    def test_defaults_are_the_declared_ones(self) -> None:
        """A config that sets nothing gets ``ServerSettings()``: the defaults live in one place."""
        assert server_config_from({"data": {"path": "p.csv"}}).settings == ServerSettings()

    def test_invalid_toml_names_the_file(self, tmp_path: Path) -> None:
        """A syntax error mentions the file."""
        bad = tmp_path / "bad.toml"
        bad.write_text("[job\nepochs = 3")
        with pytest.raises(ConfigError, match=r"bad\.toml"):
            load_toml(bad)


class TestClientConfig:
    def test_party_flag_wins_and_picks_default_cert_names(self, tmp_path: Path) -> None:
        """--party overrides the file, and the default certificate is certs/party-N.pem."""
        doc = {"client": {"party": 2}, "data": {"path": "x.csv"}}
        config = client_config_from(doc, tmp_path / "c.toml", party=3)
        assert config.party == 3
        assert config.tls is not None and config.tls.cert.name == "party-3.pem"

    def test_party_one_is_refused(self, tmp_path: Path) -> None:
        """Party 1 is the server; a client claiming it is told so."""
        with pytest.raises(ConfigError, match="party 1 is the server"):
            client_config_from({"data": {"path": "x.csv"}}, tmp_path / "c.toml", party=1)

    def test_missing_party_is_explained(self, tmp_path: Path) -> None:
        """Without --party or [client] party the error says how to give one."""
        with pytest.raises(ConfigError, match="--party N"):
            client_config_from({"data": {"path": "x.csv"}}, tmp_path / "c.toml")


class TestPartySettings:
    """Issue 49: what both daemons set (``PartySettings``) is declared once, and read from each one's own tables."""

    def test_no_daemon_declares_a_shared_setting_again(self) -> None:
        shared = {spec.name for spec in fields(PartySettings)}
        for cls in (ServerSettings, ClientSettings):
            assert not shared & set(vars(cls)["__annotations__"]), cls.__name__

    @pytest.mark.parametrize("key", ["run_dir", "keep_checkpoints", "torch_threads"])
    def test_a_shared_setting_is_in_each_daemons_own_table(self, key: str) -> None:
        """``[server] run_dir`` in the server's file, ``[client] run_dir`` in a party's: as users write them."""
        assert key in table_keys(ServerSettings, "server") and key in table_keys(ClientSettings, "client")
        assert key not in table_keys(ServerSettings, "client") and key not in table_keys(ClientSettings, "server")

    def test_the_same_keys_read_the_same_values(self, tmp_path: Path) -> None:
        """The shared keys of a server's file and a party's, alike, give alike ``PartySettings`` fields."""
        own = {"run_dir": "out", "keep_checkpoints": 4, "torch_threads": 3}
        rest = {"psi": {"workers": 2, "x25519": "openssl"}, "compute": {"device": "cuda:1"}}
        server = server_config_from({**DATA, "server": own, **rest}, tmp_path / "server.toml").settings
        client = client_config_from({**DATA, "client": own, **rest}, tmp_path / "party2.toml", party=2).settings
        for spec in fields(PartySettings):
            assert getattr(server, spec.name) == getattr(client, spec.name), spec.name
        assert client.run_dir == tmp_path / "out" and client.keep_checkpoints == 4 and client.psi_workers == 2


class TestKeepCheckpoints:
    @pytest.mark.parametrize("section", ["server", "client"])
    def test_default_is_two_and_a_value_is_read(self, tmp_path: Path, section: str) -> None:
        """Left out, ``keep_checkpoints`` is 2; set, its value reaches the config."""
        assert _keep(section, {}, tmp_path) == 2
        assert _keep(section, {"keep_checkpoints": 5}, tmp_path) == 5

    @pytest.mark.parametrize("section", ["server", "client"])
    @pytest.mark.parametrize("value", [0, -3, 1.5, "2", True])
    def test_anything_but_a_whole_number_from_one_is_refused(self, tmp_path: Path, section: str, value: object) -> None:
        """Zero, a negative, a fraction, a string or a boolean is a ConfigError naming the table and key."""
        with pytest.raises(ConfigError, match=rf"\[{section}\] keep_checkpoints = .*at least 1"):
            _keep(section, {"keep_checkpoints": value}, tmp_path)


def _keep(section: str, keys: dict[str, Any], tmp_path: Path) -> int:
    """``keep_checkpoints`` of the ``[server]`` or ``[client]`` table ``keys``, read as that daemon's config."""
    if section == "server":
        doc = {"data": {"path": "x.csv"}, "server": keys}
        return server_config_from(doc, tmp_path / "server.toml").settings.keep_checkpoints
    client: ClientConfig = client_config_from(
        {"data": {"path": "x.csv"}, "client": {"party": 2, **keys}}, tmp_path / "party2.toml"
    )
    return client.settings.keep_checkpoints


@pytest.mark.parametrize("job_id", ["test-job", "job-20261124-081530-ab12cd", "digits_v1.2", "x" * 128])
def test_plain_job_ids_are_accepted(job_id: str) -> None:
    assert job_from_document({"job": {"job_id": job_id}}).job_id == job_id


@pytest.mark.parametrize("job_id", ["../x", "a/b", "a\\b", ".hidden", "-flag", "with space", "x" * 129, "tab\t"])
def test_a_job_id_that_is_not_a_plain_name_is_refused(job_id: str) -> None:
    """A job id names a folder on every party and the served model: nothing a path or URL reads differently."""
    with pytest.raises(ConfigError, match=r"\[job\] job_id = .*; use 1 to 128 letters"):
        job_from_document({"job": {"job_id": job_id}})


#: Every settings table, by the part of docs/reference/configuration.md that documents it: (the class that
#: declares its keys, the table; None: every table the class declares). A new table is a row here.
DOCUMENTED: dict[str, tuple[tuple[type, str | None], ...]] = {
    "## `server.toml`": (
        (ServerSettings, None),
        (ServingConfig, "serving"),
        (RestLimits, "serving"),
        (JobSpec, "job"),
        (JobPlan, "model"),
        (PrivacySpec, "privacy"),
        (DistillSpec, "distill"),
    ),
    "## A job file's own keys": ((JobPlan, "job"), (JobPlan, "serving")),
    "## `partyN.toml`": ((ClientSettings, None), (PartyPrivacy, "privacy")),
}
#: Keys a table documents that no field declares, because they are read by hand: the party id
#: (``--party`` wins over it), and a job file's names for each party's dataset and model.
READ_BY_HAND = {
    ("## `partyN.toml`", "client"): {"party"},
    ("## A job file's own keys", "job"): {"dataset", "model"},
}


@pytest.mark.parametrize(("flag", "shown"), [(None, r"party2\.toml: \[client\] party = 1"), (0, "--party 0")])
def test_a_party_id_below_2_names_where_it_came_from(tmp_path: Path, flag: int | None, shown: str) -> None:
    """Found by the fuzz campaign (issue 41): the refusal named neither the file nor the key."""
    doc = {"client": {"party": 1}, "data": {"path": "x.csv"}}
    with pytest.raises(ConfigError, match=rf"(^|/){shown}: passive parties are numbered from 2"):
        client_config_from(doc, tmp_path / "party2.toml", party=flag)


class TestDocumentedSettings:
    """The configuration reference documents every table's settings as their classes declare them, and no other."""

    @staticmethod
    def documented(part: str) -> dict[str, dict[str, str]]:
        """A part's tables, from each ``### `[table]``` heading: table -> key -> default cell."""
        text = (ROOT / "docs/reference/configuration.md").read_text()
        start = text.index(part)
        end = text.find("\n## ", start + 1)
        tables: dict[str, dict[str, str]] = {}
        for section in re.split(r"^### ", text[start : end if end > 0 else None], flags=re.M)[1:]:
            heading = re.match(r"`\[(\w+)\]`", section)
            if heading is None:
                continue
            for block in re.split(r"\n\s*\n", section):  # a table of keys starts "| key |"
                if block.startswith("| key |"):
                    rows = re.findall(r"^\| `(\w+)` \| [^|]* \| ([^|]*) \|", block, flags=re.M)
                    tables.setdefault(heading.group(1), {}).update(rows)
        return tables

    @staticmethod
    def declared(part: str) -> dict[str, list[Field[Any]]]:
        found: dict[str, list[Field[Any]]] = {}
        for cls, table in DOCUMENTED[part]:
            for spec in declared_fields(cls, table):
                found.setdefault(setting_key(spec)[0], []).append(spec)
        return found

    @staticmethod
    def shown(spec: Field[Any]) -> list[str]:
        """How the doc may write a setting's default: in backticks as TOML would, or the words for "unset"."""
        value = default_of(spec)
        if value is None:
            return [str(spec.metadata["unset"])]
        if isinstance(value, bool):
            return [f"`{str(value).lower()}`"]
        if isinstance(value, str):
            return [f'`"{value}"`']
        if isinstance(value, tuple):
            return [f"`{list(value)}`"]
        if isinstance(value, float):
            return [f"`{value}`", f"`{value:g}`", re.sub(r"e-0(\d)", r"e-\1", f"`{value:g}`")]
        return [f"`{value}`"]

    @pytest.mark.parametrize("part", list(DOCUMENTED))
    def test_every_setting_is_documented_with_its_default(self, part: str) -> None:
        documented = self.documented(part)
        for table, specs in self.declared(part).items():
            for spec in specs:
                key = setting_key(spec)[1]
                assert key in documented.get(table, {}), f"configuration.md {part}: [{table}] {key} is missing"
                if spec.default is MISSING and spec.default_factory is MISSING:
                    continue  # JobSpec.job_id: named by the server when left out, as its row says
                cell = documented[table][key]
                assert any(form in cell for form in self.shown(spec)), f"{part} [{table}] {key}: the default differs"

    @pytest.mark.parametrize("part", list(DOCUMENTED))
    def test_no_documented_key_is_unknown(self, part: str) -> None:
        documented = self.documented(part)
        for table, specs in self.declared(part).items():
            keys = {setting_key(spec)[1] for spec in specs} | READ_BY_HAND.get((part, table), set())
            assert set(documented[table]) == keys, (
                f"{part} [{table}]: documented {sorted(documented[table])}, declared {sorted(keys)}"
            )


def _tail(error: pytest.ExceptionInfo[ConfigError]) -> str:
    """A refusal's message without its source (the file's name, or the class's): ``[table] key = value; ...``."""
    return str(error.value).split(": ", 1)[1]


SERVER_FILE = Path("/etc/vfl/server.toml")
PARTY_FILE = Path("/etc/vfl/party2.toml")
DATA = {"data": {"path": "party.csv"}}


#: A value out of range, built in code and written in a file: (the object built in code, the
#: class's name its message starts with, the same value read from its file).
BUILT_AND_READ: list[tuple[Any, str, Any]] = [
    (
        lambda: ServerSettings(join_timeout_s=-3),
        "ServerSettings",
        lambda: server_config_from({**DATA, "server": {"join_timeout_s": -3}}, SERVER_FILE),
    ),
    (
        lambda: ServerSettings(psi_workers=0),
        "ServerSettings",
        lambda: server_config_from({**DATA, "psi": {"workers": 0}}, SERVER_FILE),
    ),
    (
        lambda: ServerSettings(device="gpu"),
        "ServerSettings",
        lambda: server_config_from({**DATA, "compute": {"device": "gpu"}}, SERVER_FILE),
    ),
    (
        lambda: ServerSettings(torch_threads=0),
        "ServerSettings",
        lambda: server_config_from({**DATA, "server": {"torch_threads": 0}}, SERVER_FILE),
    ),
    (
        lambda: ClientSettings(keep_checkpoints=0),
        "ClientSettings",
        lambda: client_config_from({**DATA, "client": {"party": 2, "keep_checkpoints": 0}}, PARTY_FILE),
    ),
    (
        lambda: ClientSettings(psi_workers=0),
        "ClientSettings",
        lambda: client_config_from({**DATA, "psi": {"workers": 0}}, PARTY_FILE, 2),
    ),
    (
        lambda: ClientSettings(heartbeat_s=0.0),
        "ClientSettings",
        lambda: client_config_from({**DATA, "client": {"party": 2, "heartbeat_s": 0}}, PARTY_FILE),
    ),
    (
        lambda: PartyPrivacy(min_embedding_noise_multiplier=-0.5),
        "PassiveParty(privacy=...)",
        lambda: client_config_from({**DATA, "privacy": {"min_embedding_noise_multiplier": -0.5}}, PARTY_FILE, 2),
    ),
    (lambda: PrivacySpec(dp_delta=1.5), "PrivacySpec", lambda: job_from_document({"privacy": {"dp_delta": 1.5}})),
    (lambda: JobSpec(job_id="credit", epochs=0), "JobSpec", lambda: job_from_document({"job": {"epochs": 0}})),
    (
        lambda: JobSpec(job_id="credit", passive_parties=(1, 2)),
        "JobSpec",
        lambda: job_from_document({"job": {"passive_parties": [1, 2]}}),
    ),
    (
        lambda: ClientSettings(retry_initial_s=5.0, retry_max_s=1.0),
        "ClientSettings",
        lambda: client_config_from({**DATA, "client": {"retry_initial_s": 5, "retry_max_s": 1}}, PARTY_FILE, 2),
    ),
    (
        lambda: JobPlan(JobSpec(job_id="", passive_parties=(2,)), top_dropout=1.5, where="JobPlan"),
        "JobPlan",
        lambda: plan_from_document({"model": {"top_dropout": 1.5}}, default_join_timeout_s=60, where="job.toml"),
    ),
    (
        lambda: DistillSpec(temperature=-1.0),
        "DistillSpec",
        lambda: plan_from_document({"distill": {"temperature": -1.0}}, default_join_timeout_s=60),
    ),
    (
        lambda: ServingConfig(client_auth="sometimes"),
        "ServingConfig",
        lambda: serving_config_from({"serving": {"client_auth": "sometimes"}}, SERVER_FILE),
    ),
    (
        lambda: ServingConfig(grpc_listen="0.0.0.0:8001", rest_listen="0.0.0.0:8001"),
        "ServingConfig",
        lambda: serving_config_from({"serving": {"grpc_listen": "0.0.0.0:8001", "rest_listen": "0.0.0.0:8001"}}),
    ),
    (
        lambda: RestLimits(max_connections=0),
        "RestLimits",
        lambda: serving_config_from({"serving": {"max_connections": 0}}, SERVER_FILE),
    ),
]


@pytest.mark.parametrize(("build", "name", "read"), BUILT_AND_READ)
def test_a_value_built_in_code_is_refused_as_its_file_would_be(build: Any, name: str, read: Any) -> None:
    """Issue 49: one rule per setting, in its declaration, whoever builds the object; the words are the file's."""
    with pytest.raises(ConfigError) as built:
        build()
    with pytest.raises(ConfigError) as from_file:
        read()
    assert str(built.value).startswith(f"{name}: ["), built.value
    assert _tail(built) == _tail(from_file)


class TestTheIssuesExamples:
    """The plans issue 49 measured as accepted: each is refused when it is made, naming the key."""

    def test_a_plan_with_a_negative_temperature_is_refused(self) -> None:
        with pytest.raises(ConfigError, match=r"^DistillSpec: \[distill\] temperature = -1; give a number above 0"):
            JobPlan(JobSpec(job_id="", passive_parties=(2,)), distill=DistillSpec(temperature=-1.0, label_weight=7.0))
        with pytest.raises(ConfigError, match=r"\[distill\] label_weight = 7; give a weight in \[0, 1\]"):
            DistillSpec(label_weight=7.0)

    @pytest.mark.parametrize(
        ("setting", "message"),
        [
            ({"top_dropout": 1.5}, r"^job: \[model\] top_dropout = 1.5; give a rate in \[0, 1\)"),
            ({"join_timeout_s": -3}, r"^job: \[job\] join_timeout_s = -3; give a number of seconds above 0"),
        ],
    )
    def test_a_plan_out_of_range_is_refused(self, setting: dict[str, Any], message: str) -> None:
        with pytest.raises(ConfigError, match=message):
            JobPlan(JobSpec(job_id="", passive_parties=(2,)), **setting)


class TestTypos:
    """A typo is refused in every table of every document, naming the key and listing the known ones."""

    @pytest.mark.parametrize(
        ("table", "typo", "known"),
        [
            ("server", "join_timout_s", "'heartbeat_timeout_s', 'join_timeout_s'"),
            ("psi", "wokers", "'chunk_ids', 'workers', 'x25519'"),
            ("metrics", "listne", "'enabled', 'listen'"),
            ("console", "enable", "'enabled', 'listen'"),
            ("tls", "certificate", "'ca', 'cert', 'key'"),
            ("compute", "gpus", "'device', 'engine', 'ray_address'"),
            ("data", "id_col", "'held_out_ids', 'id_column', 'label_column', 'path'"),
        ],
    )
    def test_in_a_servers_config(self, table: str, typo: str, known: str) -> None:
        doc = {"data": {"path": "party1.csv"}, **{table: {**({"path": "p.csv"} if table == "data" else {}), typo: 1}}}
        with pytest.raises(
            ConfigError, match=rf"server\.toml: \[{table}\] has no key '{typo}'; the keys are \[.*{known}"
        ):
            server_config_from(doc, SERVER_FILE)

    @pytest.mark.parametrize(
        ("table", "typo"),
        [("client", "sever"), ("psi", "x2519"), ("tls", "ca_file"), ("model", "factroy"), ("compute", "devise")],
    )
    def test_in_a_partys_config(self, table: str, typo: str) -> None:
        with pytest.raises(ConfigError, match=rf"party2\.toml: \[{table}\] has no key '{typo}'; the keys are \["):
            client_config_from({**DATA, table: {typo: "x"}}, PARTY_FILE, party=2)

    def test_in_a_dataset_entry(self) -> None:
        doc = {"datasets": {"digits": {"path": "d.csv", "id_colum": "id"}}}
        with pytest.raises(ConfigError, match=r"\[datasets\.digits\] has no key 'id_colum'; the keys are \["):
            client_config_from(doc, PARTY_FILE, party=2)

    @pytest.mark.parametrize(
        ("table", "typo"),
        [("job", "epoch"), ("model", "top_hiden"), ("serving", "enable"), ("privacy", "dp_delt"), ("distill", "temp")],
    )
    def test_in_a_job_file(self, table: str, typo: str) -> None:
        with pytest.raises(ConfigError, match=rf"^job: \[{table}\] has no key '{typo}'; the keys are \["):
            plan_from_document({table: {typo: 1}}, default_join_timeout_s=60)

    @pytest.mark.parametrize(
        ("read", "table"),
        [
            (lambda doc: server_config_from({**DATA, **doc}, SERVER_FILE), "serverr"),
            (lambda doc: client_config_from({**DATA, **doc}, PARTY_FILE, party=2), "clinet"),
            (lambda doc: plan_from_document(doc, default_join_timeout_s=60), "jobb"),
        ],
    )
    def test_an_unknown_table(self, read: Any, table: str) -> None:
        known = {"serverr": "'server'", "clinet": "'client'", "jobb": "'job'"}[table]
        with pytest.raises(ConfigError, match=rf"\[{table}\] is not a table of this file; the tables are \[.*{known}"):
            read({table: {}})


def test_the_docs_state_the_rule_on_unknown_names_once() -> None:
    """docs/reference/configuration.md says once what the readers do with a typo (the tests above hold them to it)."""
    docs = {str(path.relative_to(ROOT / "docs")): path.read_text() for path in (ROOT / "docs").rglob("*.md")}
    rule = "**An unknown table or key is refused, in every file.**"
    assert docs["reference/configuration.md"].count(rule) == 1
    assert sum(text.count(rule) for text in docs.values()) == 1
    stale = re.compile(r"unknown (tables and )?keys are ignored|unlike most other tables", re.I)
    assert not [name for name, text in docs.items() if stale.search(text)]
