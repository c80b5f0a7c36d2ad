# The tool-server libraries for TypeScript (toolservers/typescript) and Java
# (toolservers/java), each tested against real servers on 127.0.0.1.
#
# test-toolserver-typescript  npm ci (cache under .tools/), copy the contract into the
#                             package, tsc, then node --test.
TSS_DIR := toolservers/typescript
TSS_DEPS_SUM := $(shell cat $(TSS_DIR)/package.json $(TSS_DIR)/package-lock.json 2>/dev/null | sha256sum | cut -c1-16)
TSS_DEPS := $(TSS_DIR)/node_modules/.installed-$(TSS_DEPS_SUM)

CLIENT_TEST += test-toolserver-typescript

.PHONY: build-toolserver-typescript test-toolserver-typescript

$(TSS_DEPS):
	cd $(TSS_DIR) && npm ci --cache $(TS_NPM_CACHE) --prefer-offline --no-audit --no-fund --loglevel=error
	touch $@

## build-toolserver-typescript: compile the TypeScript tool-server library and its tests.
build-toolserver-typescript: $(TSS_DEPS)
	cd $(TSS_DIR) && npm run --silent build

## test-toolserver-typescript: test the TypeScript tool-server library against real servers.
test-toolserver-typescript: install $(GRPCURL_STAMP) build-toolserver-typescript
	cd $(TSS_DIR) && AGENT_SIDECAR_PYTHON=$(CURDIR)/$(PY) npm test --silent

# test-toolserver-java  install the Java client into .tools/m2 (the library's stubs come from
#                       it), then mvn verify in toolservers/java; Maven's output goes to
#                       toolservers/java/target/mvn.log. Offline once everything resolved.
JTS_DIR := toolservers/java
JTS_LOG := $(JTS_DIR)/target/mvn.log
JTS_MVN = $(MVN) -B -ntp -Dmaven.repo.local=$(JAVA_M2)

CLIENT_TEST += test-toolserver-java

.PHONY: install-java-client test-toolserver-java

## install-java-client: build the Java client and install it into .tools/m2.
install-java-client: java-tools
	@mkdir -p $(JAVA_DIR)/target
	@offline=; if [ $(JAVA_M2)/.installed -nt $(JAVA_DIR)/pom.xml ]; then offline=-o; fi; \
	$(JTS_MVN) $$offline -q -f $(JAVA_DIR)/pom.xml -DskipTests install >$(JAVA_DIR)/target/install.log 2>&1 \
		|| $(JTS_MVN) -q -f $(JAVA_DIR)/pom.xml -DskipTests install >$(JAVA_DIR)/target/install.log 2>&1 \
		|| (cat $(JAVA_DIR)/target/install.log; exit 1)
	@touch $(JAVA_M2)/.installed

## test-toolserver-java: build and test the Java tool-server library against real servers.
test-toolserver-java: install $(GRPCURL_STAMP) install-java-client
	@mkdir -p $(JTS_DIR)/target; \
	offline=; if [ $(JAVA_M2)/.toolserver-resolved -nt $(JTS_DIR)/pom.xml ]; then offline=-o; fi; \
	echo "test-toolserver-java: mvn $$offline verify in $(JTS_DIR) (log: $(JTS_LOG))"; \
	$(JTS_MVN) $$offline -f $(JTS_DIR)/pom.xml verify >$(JTS_LOG) 2>&1; rc=$$?; \
	if [ $$rc != 0 ] && [ -n "$$offline" ] && [ ! -d $(JTS_DIR)/target/surefire-reports ]; then \
		$(JTS_MVN) -f $(JTS_DIR)/pom.xml verify >$(JTS_LOG) 2>&1; rc=$$?; \
	fi; \
	grep -E 'Tests run:|^\[ERROR\] .' $(JTS_LOG) | grep -vE 'Help 1|full stack trace|-X switch|please read the following|MAVEN/|^\[ERROR\] *->'; \
	if [ -d $(JTS_DIR)/target/surefire-reports ]; then touch $(JAVA_M2)/.toolserver-resolved; fi; \
	exit $$rc
