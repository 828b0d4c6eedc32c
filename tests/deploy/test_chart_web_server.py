"""The API bench serves with the chart's web server settings (issue 19): the same gunicorn
configuration file, and the web container's WEB_* environment as the chart renders it."""

from bench import api_server
from tests.deploy.test_chart import FULLNAME, env_of, helm, required  # noqa: F401 (fixtures)


def test_the_api_bench_serves_as_the_charts_web_container(required):  # noqa: F811
    web = required[("Deployment", f"{FULLNAME}-web")]
    (container,) = web["spec"]["template"]["spec"]["containers"]
    rendered = {name: e["value"] for name, e in env_of(container).items() if "value" in e}
    bench_env = api_server.chart_web_env()
    assert bench_env == {name: rendered[name] for name in bench_env}
    assert {"WEB_WORKERS", "WEB_THREADS", "WEB_KEEPALIVE"} <= set(bench_env)
    # the chart's command, which the bench runs (its port aside)
    assert container["command"][1:3] == ["-c", "deploy/gunicorn.conf.py"]
    assert container["command"][3] == api_server.WSGI_APP
