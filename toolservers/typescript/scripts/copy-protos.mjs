// Copies the tool-server contract into this package (proto/), where the server loads it at
// run time: for its service definition and for server reflection. The contract's home is
// the repository's protos/; the copy ships in the package, so a consumer needs no protos.
import { copyFileSync, mkdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const source = path.resolve(here, "..", "..", "..", "protos", "agentsidecar", "v1", "tool.proto");
const target = path.resolve(here, "..", "proto", "agentsidecar", "v1", "tool.proto");
mkdirSync(path.dirname(target), { recursive: true });
copyFileSync(source, target);
