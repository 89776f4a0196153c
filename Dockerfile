# torchdag training image: an Ascend PyTorch base plus trainer/ at /opt/torchdag/trainer and the
# pod helpers at /opt/torchdag/torchdag/agents.
#
#   docker buildx build --platform linux/arm64,linux/amd64 -t REGISTRY/torchdag-trainer:TAG .
#   docker build --build-arg BASE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime ...   # GPU/CPU nodes
#
# Nothing below is architecture specific: the base's own arm64 (Kunpeng/Phytium,
# Kylin V10 hosts) or amd64 variant is pulled for the target platform.
ARG BASE=swr.cn-south-1.myhuaweicloud.com/ascendhub/ascend-pytorch:24.0.RC2-A2-2.1.0-ubuntu20.04
FROM ${BASE}

# Installing needs root, whatever user the base ends on.
USER 0
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# The trainer's own packages, whatever the base (PyYAML: trainer/device.py reads the catalogue;
# a plain python3 + torch base lacks it). PIP_BREAK_SYSTEM_PACKAGES: a Debian or Ubuntu 23.04+
# base marks its python3 externally managed (PEP 668); older pips ignore the variable.
COPY trainer/requirements.txt /opt/torchdag/trainer/requirements.txt
RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir -r /opt/torchdag/trainer/requirements.txt

# Set REQUIREMENTS=none for a base without CANN (a CUDA or CPU image).
ARG REQUIREMENTS=trainer/requirements-ascend.txt
COPY trainer/requirements-ascend.txt /opt/torchdag/trainer/requirements-ascend.txt
RUN if [ "${REQUIREMENTS}" != "none" ]; then \
        python3 -m pip install --no-cache-dir -r "/opt/torchdag/${REQUIREMENTS}"; \
    fi

# Run as uid 1000: the Ascend images' HwHiAiUser when present (it owns the
# driver files), else a new user. Membership in the HwHiAiUser group opens
# /dev/davinci* to it.
RUN if ! getent passwd 1000 >/dev/null; then \
        useradd --create-home --uid 1000 --user-group --shell /bin/bash torchdag; \
    fi; \
    if getent group HwHiAiUser >/dev/null; then \
        usermod -a -G HwHiAiUser "$(getent passwd 1000 | cut -d: -f1)"; \
    fi

COPY trainer/ /opt/torchdag/trainer/
# trainer/device.py reads the device kinds' backends from the catalogue, as in a checkout.
COPY torchdag/catalog.yaml /opt/torchdag/torchdag/catalog.yaml
# The pod helpers, at the path a Workflow runs them from (agents.fromWorkflow: false leaves them
# to the image); the trainer imports three of them as torchdag.agents, so the package's
# __init__.py comes too: a torchdag installed in the base cannot stand in for it.
COPY torchdag/__init__.py /opt/torchdag/torchdag/__init__.py
COPY torchdag/agents/ /opt/torchdag/torchdag/agents/
RUN chmod 0755 /opt/torchdag/trainer/entrypoint.sh \
    && python3 -m compileall -q /opt/torchdag/trainer /opt/torchdag/torchdag

ENV PYTHONPATH=/opt/torchdag \
    PYTHONUNBUFFERED=1
WORKDIR /opt/torchdag
USER 1000

ENTRYPOINT ["/opt/torchdag/trainer/entrypoint.sh"]
CMD ["torchrun", "--nproc-per-node=1", "/opt/torchdag/trainer/train.py", "--max-steps", "50"]
