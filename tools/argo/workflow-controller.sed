# Applied to Argo's cmd/workflow-controller/main.go before it is built (Makefile): Argo's
# health server listens on ":6060", every interface, always. TORCHDAG_HEALTHZ_ADDRESS, when
# set, names the address instead (the local cluster: 127.0.0.1 and a port of its own, so
# two clusters on one machine do not meet); unset, Argo's ":6060" stands.
s|http.ListenAndServe(":6060", nil)|http.ListenAndServe(cmp.Or(os.Getenv("TORCHDAG_HEALTHZ_ADDRESS"), ":6060"), nil)|
s|^import (|import (\n\t"cmp"|
