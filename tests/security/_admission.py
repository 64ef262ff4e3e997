"""ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) evaluated as the API server does,
for the policies of config/admission: a binding applies when its namespaceSelector matches the
request's namespace; its policy when a resourceRule matches the operation and resource and every
matchCondition is true; then the variables are computed and every validation must be true (an
evaluation error denies: failurePolicy Fail).  The CEL is kubesim's (cel-python with Kubernetes'
quantity, string and list libraries), the one that evaluates our CRDs' x-kubernetes-validations.

Not modelled: paramKind/paramRef, matchPolicy Equivalent, excludeResourceRules, objectSelector,
auditAnnotations and messageExpression (config/admission uses none of them: test_admission.py
checks)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes

from kubeselect import LabelSelector
from kubesim.validation import _compile_cel, _to_cel

POLICY = "ValidatingAdmissionPolicy"
BINDING = "ValidatingAdmissionPolicyBinding"
UNSUPPORTED = ("paramKind", "auditAnnotations")


@dataclass(frozen=True)
class Request:
    operation: str                 # CREATE, UPDATE
    resource: str                  # pods, persistentvolumeclaims (core group, v1)
    namespace: str
    namespace_labels: dict[str, str]
    username: str
    groups: tuple[str, ...] | None = ("system:authenticated",)  # None: no groups at all (the key left out)


def _eval(expression: str, activation: dict[str, Any]) -> Any:
    try:
        result = _compile_cel(expression).evaluate(activation)
    except celpy.CELEvalError as err:
        return err
    return result


def _rule_matches(rules: list[dict[str, Any]], request: Request) -> bool:
    return any("" in (r.get("apiGroups") or []) and "v1" in (r.get("apiVersions") or [])
               and request.operation in (r.get("operations") or []) and request.resource in (r.get("resources") or [])
               for r in rules)


class Admission:
    def __init__(self, objects: list[dict[str, Any]]):
        self.policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == POLICY}
        self.bindings = [o for o in objects if o["kind"] == BINDING]
        for policy in self.policies.values():
            unsupported = [k for k in UNSUPPORTED if k in policy["spec"]]
            assert not unsupported, "%s uses %s, which this evaluator does not model" % (
                policy["metadata"]["name"], unsupported)
        for binding in self.bindings:
            assert binding["spec"]["policyName"] in self.policies, binding["metadata"]["name"]
            assert binding["spec"]["validationActions"] == ["Deny"], binding["metadata"]["name"]

    def review(self, request: Request, obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
        """The denials of every policy that applies ([] = admitted)."""
        denials = []
        for binding in self.bindings:
            selector = (binding["spec"].get("matchResources") or {}).get("namespaceSelector") or {}
            if not LabelSelector.from_dict(selector).matches(request.namespace_labels):
                continue
            spec = self.policies[binding["spec"]["policyName"]]["spec"]
            if not _rule_matches(spec["matchConstraints"]["resourceRules"], request):
                continue
            user_info: dict[str, Any] = {"username": request.username}
            if request.groups is not None:
                user_info["groups"] = list(request.groups)
            activation = {
                "object": _to_cel(obj), "oldObject": _to_cel(old),
                "request": _to_cel({"operation": request.operation, "namespace": request.namespace,
                                    "resource": {"group": "", "version": "v1", "resource": request.resource},
                                    "userInfo": user_info}),
            }
            conditions = [_eval(c["expression"], activation) for c in spec.get("matchConditions") or []]
            if any(isinstance(c, celpy.CELEvalError) for c in conditions):
                denials.append("matchCondition error: %s" % conditions)
                continue
            if not all(bool(c) for c in conditions):
                continue
            variables: dict[str, Any] = {}
            for var in spec.get("variables") or []:
                activation["variables"] = celtypes.MapType(variables)
                variables[celtypes.StringType(var["name"])] = _eval(var["expression"], activation)
            activation["variables"] = celtypes.MapType(variables)
            for validation in spec["validations"]:
                result = _eval(validation["expression"], activation)
                if isinstance(result, celpy.CELEvalError):
                    denials.append("%s (evaluation error: %s)" % (validation["message"], result))
                elif not bool(result):
                    denials.append(validation["message"])
        return denials
