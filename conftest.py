"""Repository-wide pytest configuration: the kubesim fixtures (`kubesim`, `kubesim_module`,
`kubeconfig_env`) are available to every test directory."""
pytest_plugins = ["kubesim.pytest_plugin"]
