module torchdag/tools/argolint-report

go 1.25

require sigs.k8s.io/yaml v1.4.0
