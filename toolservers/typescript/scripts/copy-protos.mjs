// Copies the contracts into this package (proto/), where the server loads them at run time:
// the tool-server contract (tool.proto) for its service definition and for server reflection,
// and the sidecar's identity keys service (identity.proto) for fetching the keys the identity
// assertions are verified with (--identity-keys-from). Their home is the repository's protos/;
// the copies ship in the package, so a consumer needs no protos.
import { copyFileSync, mkdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
for (const name of ["tool.proto", "identity.proto"]) {
  const source = path.resolve(here, "..", "..", "..", "protos", "agentsidecar", "v1", name);
  const target = path.resolve(here, "..", "proto", "agentsidecar", "v1", name);
  mkdirSync(path.dirname(target), { recursive: true });
  copyFileSync(source, target);
}
