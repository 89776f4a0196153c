// Command podsecurity evaluates pods against a Pod Security Standards level with
// Kubernetes' own admission code (k8s.io/pod-security-admission), offline.
//
// stdin: {"level": "baseline"|"restricted", "pods": [Pod, ...]} as JSON.
// stdout: one JSON object per pod, in order: {"name", "allowed", "message"}, where message
// is the admission plugin's own refusal text ("violates PodSecurity ...") or "".
// Exit status: 0 evaluated, 2 bad input.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

type request struct {
	Level string       `json:"level"`
	Pods  []corev1.Pod `json:"pods"`
}

type verdict struct {
	Name    string `json:"name"`
	Allowed bool   `json:"allowed"`
	Message string `json:"message"`
}

func main() {
	var req request
	decoder := json.NewDecoder(os.Stdin)
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&req); err != nil {
		fmt.Fprintf(os.Stderr, "podsecurity: bad input: %v\n", err)
		os.Exit(2)
	}
	level, err := api.ParseLevel(req.Level)
	if err != nil {
		fmt.Fprintf(os.Stderr, "podsecurity: %v\n", err)
		os.Exit(2)
	}
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "podsecurity: %v\n", err)
		os.Exit(2)
	}
	enforce := api.LevelVersion{Level: level, Version: api.LatestVersion()}
	out := json.NewEncoder(os.Stdout)
	for i := range req.Pods {
		pod := &req.Pods[i]
		result := policy.AggregateCheckResults(evaluator.EvaluatePod(enforce, &pod.ObjectMeta, &pod.Spec))
		v := verdict{Name: pod.Name, Allowed: result.Allowed}
		if !result.Allowed {
			// The admission plugin's wording (admission/admission.go).
			v.Message = fmt.Sprintf("violates PodSecurity %q: %s", enforce.String(), result.ForbiddenDetail())
		}
		if err := out.Encode(v); err != nil {
			fmt.Fprintf(os.Stderr, "podsecurity: %v\n", err)
			os.Exit(2)
		}
	}
}
