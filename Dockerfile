# torchdev operator image: the collection torchdev.operator on top of the Ansible Operator SDK
# base image. watches.yaml names the roles by their FQCN (torchdev.operator.devserver, ...);
# ansible-operator finds them under ~/.ansible/collections, where the collection is installed.
FROM quay.io/operator-framework/ansible-operator:v1.39.2

# The base image's ansible-core is 2.18: unless Jinja2's native types are on, it turns a template
# whose value is None into "" (2.19 keeps None), and the roles test facts with `is none` (e.g. a
# DevServer without problem would be reported as one).  `make test-image` runs the roles with
# the base's ansible-core and this environment (hack/image.py, docs/delivery.md).
ENV ANSIBLE_JINJA2_NATIVE=True

# Collections the roles use (kubernetes.core), pinned in requirements.yml.
COPY requirements.yml ${HOME}/requirements.yml
RUN ansible-galaxy collection install -r "${HOME}/requirements.yml" \
 && chmod -R ug+rwx "${HOME}/.ansible"

# The kubernetes Python client (used by kubernetes.core and by our k8s_status / k8s_observe
# modules) ships with the base image; pin the version kubernetes.core 6.x supports if it does not.
# Users by number (hadolint DL3066): 0 is root, 1001 the base image's ansible user (its USER_UID).
USER 0
RUN python3 -c "import kubernetes" 2>/dev/null || python3 -m pip install --no-cache-dir "kubernetes>=24.2.0,<38"
USER 1001

# This repository is the collection torchdev.operator (galaxy.yml): build it from the files a
# collection holds and install it where ansible-operator and ansible-playbook look.
COPY galaxy.yml README.md ${HOME}/torchdev-src/
COPY meta/ ${HOME}/torchdev-src/meta/
COPY plugins/ ${HOME}/torchdev-src/plugins/
COPY roles/ ${HOME}/torchdev-src/roles/
COPY playbooks/ ${HOME}/torchdev-src/playbooks/
RUN ansible-galaxy collection build "${HOME}/torchdev-src" --output-path /tmp/torchdev-dist \
 && ansible-galaxy collection install /tmp/torchdev-dist/torchdev-operator-*.tar.gz -p "${HOME}/.ansible/collections" \
 && rm -rf "${HOME}/torchdev-src" /tmp/torchdev-dist \
 && chmod -R ug+rwx "${HOME}/.ansible"

# The metrics exporter (torchdev_exporter/, docs/metrics.md): the operator Deployment's second
# container runs it from this image; it imports the collection's module_utils from
# ~/.ansible/collections (PYTHONPATH in config/manager/manager.yaml).
USER 0
RUN python3 -m pip install --no-cache-dir "prometheus-client==0.26.0"
USER 1001
COPY torchdev_exporter/ ${HOME}/torchdev_exporter/

COPY watches.yaml ${HOME}/watches.yaml
