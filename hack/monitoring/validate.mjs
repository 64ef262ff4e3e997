// Validate Prometheus Operator objects (monitoring.coreos.com/v1) against the schemas of its
// CRDs: node validate.mjs FILE.json, FILE a JSON list of objects.  Prints one JSON line per
// object ({kind, name, valid, errors}) and exits 1 when one is invalid or of an unknown kind.
import { readFileSync } from "node:fs";
import * as v1 from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

const objects = JSON.parse(readFileSync(process.argv[2], "utf8"));
let failed = false;
for (const obj of objects) {
  const name = (obj.metadata || {}).name;
  const Model = obj.apiVersion === "monitoring.coreos.com/v1" ? v1[obj.kind] : undefined;
  let errors = [];
  if (!Model) {
    errors = [`not a monitoring.coreos.com/v1 kind: ${obj.apiVersion} ${obj.kind}`];
  } else {
    try {
      new Model(obj).validate();
    } catch (err) {
      errors = [err.message];
    }
  }
  failed ||= errors.length > 0;
  console.log(JSON.stringify({ kind: obj.kind, name, valid: errors.length === 0, errors }));
}
process.exit(failed ? 1 : 0);
