# torchdev operator image: the roles on top of the Ansible Operator SDK base image.
FROM quay.io/operator-framework/ansible-operator:v1.39.2

# Collections the roles use (kubernetes.core), pinned in requirements.yml.
COPY requirements.yml ${HOME}/requirements.yml
RUN ansible-galaxy collection install -r ${HOME}/requirements.yml \
 && chmod -R ug+rwx ${HOME}/.ansible

# The kubernetes Python client (used by kubernetes.core and by our torchdev_status module)
# ships with the base image; pin the version kubernetes.core 6.x supports if it does not.
USER root
RUN python3 -c "import kubernetes" 2>/dev/null || python3 -m pip install --no-cache-dir "kubernetes>=24.2.0,<38"
USER ${USER_UID:-1001}

# Our own plugins: filters (torchdev_*), modules (torchdev_status, torchdev_observe,
# requeue_after), the requeue_after action plugin and the module_utils.
COPY plugins/ ${HOME}/plugins/
ENV ANSIBLE_FILTER_PLUGINS=${HOME}/plugins/filter \
    ANSIBLE_ACTION_PLUGINS=${HOME}/plugins/action \
    ANSIBLE_DOC_FRAGMENT_PLUGINS=${HOME}/plugins/doc_fragments \
    ANSIBLE_LIBRARY=${HOME}/plugins/modules \
    ANSIBLE_MODULE_UTILS=${HOME}/plugins/module_utils \
    ANSIBLE_ROLES_PATH=${HOME}/roles

COPY watches.yaml ${HOME}/watches.yaml
COPY roles/ ${HOME}/roles/
COPY playbooks/ ${HOME}/playbooks/
