// Module k8s.io/sample-apiserver at v0.32.7 is not served by the module proxy. k8s.io/kubernetes
// v1.32.7 names it in its go.mod, but nothing scheduler-plugins builds imports it: this empty
// module stands in for it in the module graph only.
module k8s.io/sample-apiserver

go 1.23.0
