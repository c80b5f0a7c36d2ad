package dev.agentsidecar.toolserver;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JavaType;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.protobuf.Duration;
import com.networknt.schema.JsonSchema;
import com.networknt.schema.JsonSchemaFactory;
import com.networknt.schema.SpecVersion;
import com.networknt.schema.ValidationMessage;
import dev.agentsidecar.v1.ToolDescriptor;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.lang.reflect.Parameter;
import java.lang.reflect.Type;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * One tool: an annotated method, checked once when it is registered, with its descriptor, its
 * argument validator and the binding of validated arguments to the method's parameters.
 */
final class RegisteredTool {
  // The pattern model APIs (OpenAI, Groq) accept for function names.
  private static final Pattern NAME = Pattern.compile("[A-Za-z0-9_-]{1,64}");
  private static final Pattern PLACEHOLDER = Pattern.compile("\\{([^{}]*)\\}");
  private static final JsonSchemaFactory SCHEMAS =
      JsonSchemaFactory.getInstance(SpecVersion.VersionFlag.V202012);
  private static final int MAX_SHOWN = 80;

  final String name;
  final ToolDescriptor descriptor;
  private final Object target;
  private final Method method;
  private final JsonSchema validator;
  private final List<Binding> bindings;
  private final Map<String, String> expected;
  private final ObjectMapper json;

  private record Binding(String name, JavaType type, boolean context, boolean optional) {}

  RegisteredTool(Object target, Method method, String serverVersion, ObjectMapper json) {
    Tool tool = method.getAnnotation(Tool.class);
    this.target = target;
    this.method = method;
    this.json = json;
    this.name = tool.name().isEmpty() ? method.getName() : tool.name();
    String where = "tool \"" + name + "\" (" + method.getDeclaringClass().getSimpleName() + "." + method.getName() + ")";
    if (!NAME.matcher(name).matches()) {
      throw new ToolDefinitionException(where + ": invalid name; use 1 to 64 characters of letters,"
          + " digits, '_' and '-' (model APIs reject other names), or set @Tool(name = \"...\")");
    }
    if (!Modifier.isPublic(method.getModifiers()) || !Modifier.isPublic(method.getDeclaringClass().getModifiers())) {
      throw new ToolDefinitionException(where + ": a tool method and its class must be public");
    }
    if (Modifier.isStatic(method.getModifiers()) != (target == null)) {
      throw new ToolDefinitionException(where + ": register static tools with the class, instance tools with an object");
    }
    if (tool.description().isBlank()) {
      throw new ToolDefinitionException(where + ": no description; say what the tool does and when to use it: the model reads it");
    }
    if (tool.readOnly() && tool.destructive()) {
      throw new ToolDefinitionException(where + ": a tool cannot be both readOnly and destructive");
    }
    if (tool.cacheTtlSeconds() != 0 && !tool.readOnly()) {
      throw new ToolDefinitionException(where + ": cacheTtlSeconds needs readOnly = true; serving a cached result would skip the tool's effect");
    }
    if (tool.readOnly() && tool.writeKeys().length > 0) {
      throw new ToolDefinitionException(where + ": a readOnly tool cannot declare writeKeys");
    }
    if (tool.timeoutSeconds() < 0 || tool.cacheTtlSeconds() < 0) {
      throw new ToolDefinitionException(where + ": timeoutSeconds and cacheTtlSeconds are positive seconds (0: unset)");
    }

    ObjectNode input = json.createObjectNode().put("type", "object");
    ObjectNode properties = input.putObject("properties");
    ArrayNode required = json.createArrayNode();
    List<Binding> bindings = new ArrayList<>();
    Map<String, String> expected = new LinkedHashMap<>();
    for (Parameter parameter : method.getParameters()) {
      if (parameter.getType() == ToolContext.class) {
        bindings.add(new Binding("", null, true, false));
        continue;
      }
      Arg arg = parameter.getAnnotation(Arg.class);
      String argName = arg != null && !arg.name().isEmpty() ? arg.name() : parameter.getName();
      if (!parameter.isNamePresent() && (arg == null || arg.name().isEmpty())) {
        throw new ToolDefinitionException(where + ": parameter " + argName + " has no name in the class"
            + " file; compile with -parameters (maven-compiler-plugin <parameters>true</parameters>)"
            + " or name it with @Arg(name = \"...\")");
      }
      if (properties.has(argName)) {
        throw new ToolDefinitionException(where + ": two parameters are named " + argName);
      }
      Type type = parameter.getParameterizedType();
      ObjectNode schema = Schemas.of(type, where + " argument " + argName);
      if (arg != null && !arg.description().isEmpty()) {
        schema.put("description", arg.description());
      }
      properties.set(argName, schema);
      boolean optional = Schemas.isOptional(type);
      if (!optional) {
        required.add(argName);
      }
      expected.put(argName, expectation(schema));
      bindings.add(new Binding(argName, json.getTypeFactory().constructType(type), false, optional));
    }
    if (!required.isEmpty()) {
      input.set("required", required);
    }
    input.put("additionalProperties", false);
    checkKeys(where, "readKeys", tool.readKeys(), expected.keySet());
    checkKeys(where, "writeKeys", tool.writeKeys(), expected.keySet());
    for (String field : tool.resultFields()) {
      if (field.isEmpty() || List.of(field.split("\\.", -1)).contains("")) {
        throw new ToolDefinitionException(where + ": resultFields entries are field names or dotted paths such as 'parcel.eta', got \"" + field + "\"");
      }
    }
    this.bindings = List.copyOf(bindings);
    this.expected = expected;
    this.validator = SCHEMAS.getSchema(input);

    ToolDescriptor.Builder descriptor =
        ToolDescriptor.newBuilder()
            .setName(name)
            .setDescription(tool.description().strip())
            .setInputSchema(input.toString())
            .setReadOnly(tool.readOnly())
            .setIdempotent(tool.idempotent())
            .setDestructive(tool.destructive())
            .setRequiresApproval(tool.requiresApproval())
            .addAllReadKeys(List.of(tool.readKeys()))
            .addAllWriteKeys(List.of(tool.writeKeys()))
            .setVersion(tool.version().isEmpty() ? serverVersion : tool.version())
            .addAllResultFields(List.of(tool.resultFields()));
    Type output = method.getGenericReturnType();
    if (output != String.class && output != void.class && output != Object.class) {
      try {
        descriptor.setOutputSchema(Schemas.of(output, where + " return type").toString());
      } catch (ToolDefinitionException e) {
        // An output with no schema here (Map<String, Object>, say) is still sent as JSON.
      }
    }
    if (tool.timeoutSeconds() > 0) {
      descriptor.setDefaultTimeout(duration(tool.timeoutSeconds()));
    }
    if (tool.cacheTtlSeconds() > 0) {
      descriptor.setCacheTtl(duration(tool.cacheTtlSeconds()));
    }
    this.descriptor = descriptor.build();
  }

  /** Validates arguments; the message for the model, or empty when they are valid. */
  Optional<String> violations(JsonNode arguments) {
    Set<ValidationMessage> errors = validator.validate(arguments);
    if (errors.isEmpty()) {
      return Optional.empty();
    }
    List<String> lines = new ArrayList<>();
    errors.stream()
        .sorted(Comparator.comparing((ValidationMessage m) -> m.getInstanceLocation().toString())
            .thenComparing(ValidationMessage::getType))
        .map(this::line)
        .distinct()
        .forEach(lines::add);
    return Optional.of("Invalid arguments for " + name + ":\n" + String.join("\n", lines)
        + "\nCall " + name + " again with corrected arguments.");
  }

  private String line(ValidationMessage error) {
    String where = path(error.getInstanceLocation().toString());
    String type = error.getType();
    if ("required".equals(type)) {
      String missing = error.getProperty();
      if (where.isEmpty()) {
        return "- " + missing + ": required argument is missing; expected " + expected.get(missing);
      }
      return "- " + where + "." + missing + ": required field is missing";
    }
    if ("additionalProperties".equals(type)) {
      String extra = error.getProperty();
      if (where.isEmpty()) {
        String allowed = expected.isEmpty() ? "no arguments" : String.join(", ", expected.keySet());
        return "- " + extra + ": unknown argument; " + name + " takes: " + allowed;
      }
      return "- " + where + "." + extra + ": unknown field; remove it";
    }
    String message = error.getMessage();
    int colon = message.indexOf(": ");
    String text = colon >= 0 && message.startsWith("$") ? message.substring(colon + 2) : message;
    return "- " + (where.isEmpty() ? "(arguments)" : where) + ": " + text + "; got " + shown(error.getInstanceNode());
  }

  /** Calls the method with validated arguments; what it throws comes out unwrapped. */
  Object invoke(JsonNode arguments, ToolContext context) throws Exception {
    Object[] values = new Object[bindings.size()];
    for (int i = 0; i < values.length; i++) {
      Binding binding = bindings.get(i);
      if (binding.context()) {
        values[i] = context;
        continue;
      }
      JsonNode value = arguments.get(binding.name());
      if (value == null && binding.optional()) {
        values[i] = json.convertValue(json.nullNode(), binding.type()); // Optional.empty() and kin
      } else {
        values[i] = json.convertValue(value, binding.type());
      }
    }
    try {
      return method.invoke(target, values);
    } catch (InvocationTargetException e) {
      if (e.getCause() instanceof Error error) {
        throw error;
      }
      throw (Exception) e.getCause();
    }
  }

  /** The output for the model: a string as is, anything else as JSON. */
  String encode(Object value) throws JsonProcessingException {
    return value instanceof String text ? text : json.writeValueAsString(value);
  }

  private static void checkKeys(String where, String what, String[] keys, Set<String> arguments) {
    for (String key : keys) {
      if (key.isEmpty()) {
        throw new ToolDefinitionException(where + ": " + what + " entries must be non-empty");
      }
      Matcher matcher = PLACEHOLDER.matcher(key);
      while (matcher.find()) {
        if (!arguments.contains(matcher.group(1))) {
          throw new ToolDefinitionException(where + ": " + what + " entry \"" + key + "\" uses {"
              + matcher.group(1) + "}, but a placeholder must name a top-level argument, one of "
              + arguments);
        }
      }
    }
  }

  private static Duration duration(double seconds) {
    long whole = (long) Math.floor(seconds);
    return Duration.newBuilder().setSeconds(whole).setNanos((int) Math.round((seconds - whole) * 1e9)).build();
  }

  private static String expectation(JsonNode schema) {
    if (schema.has("enum")) {
      List<String> values = new ArrayList<>();
      schema.get("enum").forEach(v -> values.add(v.toString()));
      return "one of " + String.join(", ", values);
    }
    if ("array".equals(schema.path("type").asText()) && schema.has("items")) {
      return "array of " + expectation(schema.get("items"));
    }
    return schema.path("type").asText("a value");
  }

  /** {@code $.lines[1].sku} → {@code lines[1].sku}; the root is "". */
  private static String path(String location) {
    String text = location.startsWith("$") ? location.substring(1) : location;
    return text.startsWith(".") ? text.substring(1) : text;
  }

  private static String shown(JsonNode node) {
    String text = node == null ? "nothing" : node.toString();
    return text.length() <= MAX_SHOWN ? text : text.substring(0, MAX_SHOWN - 3) + "...";
  }
}
