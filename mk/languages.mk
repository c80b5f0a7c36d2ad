# Tests across languages (tests/languages): one sidecar calling tools served in Python, Go,
# TypeScript and Java in one step, and each documented install path run from an empty
# directory. `make pytest` leaves tests/languages out; this target builds what they use first.
#
# languages-builds  the Go currency example (.tools/bin), the TypeScript client and tool-server
#                   library (npm pack'ed into .tools/packs), the Java client and tool-server
#                   library installed into .tools/m2, and the Java example's classpath.
TS_PACKS := .tools/packs

CLIENT_TEST += test-languages

.PHONY: languages-builds test-languages

languages-builds: install build-typescript build-toolserver-typescript install-java-client
	mkdir -p .tools/bin $(TS_PACKS)
	cd toolservers/go && $(GO) build -o $(CURDIR)/.tools/bin/currency-toolserver ./examples/currency
	rm -f $(TS_PACKS)/*.tgz
	cd $(TS_DIR) && npm pack --ignore-scripts --silent --pack-destination $(CURDIR)/$(TS_PACKS) >/dev/null
	cd $(TSS_DIR) && npm pack --ignore-scripts --silent --pack-destination $(CURDIR)/$(TS_PACKS) >/dev/null
	@mkdir -p $(JTS_DIR)/target; \
	offline=; if [ $(JAVA_M2)/.toolserver-resolved -nt $(JTS_DIR)/pom.xml ]; then offline=-o; fi; \
	$(JTS_MVN) $$offline -q -f $(JTS_DIR)/pom.xml -DskipTests install \
		dependency:build-classpath -Dmdep.outputFile=target/classpath.txt >$(JTS_DIR)/target/install.log 2>&1 \
		|| $(JTS_MVN) -q -f $(JTS_DIR)/pom.xml -DskipTests install \
			dependency:build-classpath -Dmdep.outputFile=target/classpath.txt >$(JTS_DIR)/target/install.log 2>&1 \
		|| (cat $(JTS_DIR)/target/install.log; exit 1)

## test-languages: one sidecar with tool servers in four languages, and every documented
## install path from an empty directory (tests/languages).
test-languages: languages-builds
	AGENT_SIDECAR_M2=$(JAVA_M2) AGENT_SIDECAR_NPM_CACHE=$(TS_NPM_CACHE) $(PY) -m pytest -q tests/languages
