"""Container images for the local cluster's real nodes, built here from packages (Debian's
mmdebstrap and buildah, torch from PyPI) and imported into containerd: see recipes.py for
the images, store.py for the cache the nodes share."""
