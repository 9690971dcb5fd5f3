"""values.schema.json refuses values that would render a broken install, naming the key at
fault, and accepts the documented ones. Helm applies it on install, upgrade, template and lint;
these tests go through Helm's own validator."""

from __future__ import annotations

import json

import helm_python as helm
import jsonschema
import pytest
import yaml
from charts.generate import CHART

from tests.chart.support import VALUE_SETS

pytestmark = pytest.mark.unit

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())


@pytest.fixture(scope="module")
def chart():
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def test_schema_is_valid_draft7():
    jsonschema.Draft7Validator.check_schema(SCHEMA)


def _keys(node: dict, schema: dict, prefix: str = "") -> list[str]:
    """Dotted paths of values.yaml keys whose schema node lists properties."""
    paths = []
    for key, value in node.items():
        paths.append(prefix + key)
        sub = schema.get("properties", {}).get(key, {})
        if isinstance(value, dict) and "properties" in sub:
            paths += _keys(value, sub, f"{prefix}{key}.")
    return paths


def _schema_keys(schema: dict, prefix: str = "") -> list[str]:
    paths = []
    for key, sub in schema.get("properties", {}).items():
        paths.append(prefix + key)
        if "properties" in sub and sub.get("type") == "object":
            paths += _schema_keys(sub, f"{prefix}{key}.")
    return paths


def test_schema_and_values_yaml_describe_the_same_keys():
    # Every documented value is checked, and the schema has no key values.yaml does not show
    # (`global` is Helm's, set when the chart is a subchart; issuerRef's keys are optional).
    documented = set(_keys(DEFAULTS, SCHEMA))
    checked = set(_schema_keys(SCHEMA)) - {"global"}
    checked -= {"webhook.certManager.issuerRef." + k for k in ("name", "kind", "group")}
    assert documented == checked


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_accepts_the_supported_installs(chart, name):
    chart.validate_schema(VALUE_SETS[name])


@pytest.mark.parametrize(("values", "where"), [
    ({"watchNamespaces": ["Team_A"]}, "/watchNamespaces/0"),
    ({"watchNamespaces": "team-a"}, "/watchNamespaces"),
    ({"watchNamespaces": ["team-a", "team-a"]}, "/watchNamespaces"),
    ({"logFormat": "xml"}, "/logFormat"),
    ({"image": {"repository": ""}}, "/image/repository"),
    ({"image": {"repository": "r", "digest": "latest"}}, "/image/digest"),
    ({"image": {"repository": "r", "pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"httpPort": 0}, "/httpPort"),
    ({"httpPort": "8080"}, "/httpPort"),
    ({"webhook": {"port": 70000}}, "/webhook/port"),
    ({"webhook": {"failurePolicy": "Retry"}}, "/webhook/failurePolicy"),
    ({"webhook": {"timeoutSeconds": 31}}, "/webhook/timeoutSeconds"),
    ({"webhook": {"certDir": "relative/dir"}}, "/webhook/certDir"),
    ({"webhook": {"enabled": True, "certManager": {"enabled": False}}},
     "/webhook/existingSecret"),
    ({"webhook": {"enabled": True, "certManager": {"enabled": False},
                  "existingSecret": "cert"}}, "/webhook/caBundle"),
    ({"webhook": {"caBundle": "not base64!"}}, "/webhook/caBundle"),
    ({"workloadPolicies": {"enabled": True}}, "/gcp/project"),
    ({"workloadPolicies": {"enabled": True}, "gcp": {"project": "acme-ml"}}, "/gcp/region"),
    ({"gcp": {"region": "us-central1-a"}}, "/gcp/region"),
    ({"gcp": {"serviceAccount": "someone@gmail.com"}}, "/gcp/serviceAccount"),
    ({"serviceAccount": {"create": False}}, "/serviceAccount/name"),
    ({"podSecurityContext": {"runAsUser": 0}}, "/podSecurityContext/runAsUser"),
    ({"resources": {"limits": {"memory": "lots"}}}, "/resources/limits/memory"),
    ({"metrics": {"serviceMonitor": {"interval": "30 seconds"}}},
     "/metrics/serviceMonitor/interval"),
    ({"replicaCount": 2}, "replicaCount"),
    ({"webhook": {"enable": True}}, "enable"),
])
def test_refuses_bad_values(chart, values, where):
    with pytest.raises(helm.HelmValuesError) as err:
        chart.validate_schema(values)
    assert where in str(err.value), str(err.value)
