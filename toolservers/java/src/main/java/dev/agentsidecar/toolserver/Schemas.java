package dev.agentsidecar.toolserver;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.lang.reflect.GenericArrayType;
import java.lang.reflect.ParameterizedType;
import java.lang.reflect.RecordComponent;
import java.lang.reflect.Type;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.Collection;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalDouble;
import java.util.OptionalInt;
import java.util.OptionalLong;

/**
 * JSON Schemas (draft 2020-12) from Java types: {@code String}, the integer and floating-point
 * types (boxed or not, {@code BigInteger}, {@code BigDecimal}), {@code boolean}, enums, arrays,
 * lists and sets, {@code Map<String, T>}, {@code Optional<T>} (an argument that may be left out)
 * and records (objects whose components are their properties, all required but the optional
 * ones). Anything else is a {@link ToolDefinitionException} naming the type.
 */
final class Schemas {
  private static final JsonNodeFactory JSON = JsonNodeFactory.instance;

  private Schemas() {}

  /** True for {@code Optional<T>} and its primitive cousins: an argument that may be left out. */
  static boolean isOptional(Type type) {
    Class<?> raw = raw(type);
    return raw == Optional.class
        || raw == OptionalInt.class
        || raw == OptionalLong.class
        || raw == OptionalDouble.class;
  }

  /** The schema of one type; {@code where} names it in an error. */
  static ObjectNode of(Type type, String where) {
    return of(type, where, 0);
  }

  private static ObjectNode of(Type type, String where, int depth) {
    if (depth > 16) {
      throw new ToolDefinitionException(where + ": types nest too deep (a recursive record?)");
    }
    Class<?> raw = raw(type);
    ObjectNode schema = JSON.objectNode();
    if (raw == String.class || raw == char.class || raw == Character.class) {
      return schema.put("type", "string");
    }
    if (raw == boolean.class || raw == Boolean.class) {
      return schema.put("type", "boolean");
    }
    if (raw == int.class || raw == Integer.class || raw == long.class || raw == Long.class
        || raw == short.class || raw == Short.class || raw == byte.class || raw == Byte.class
        || raw == BigInteger.class || raw == OptionalInt.class || raw == OptionalLong.class) {
      return schema.put("type", "integer");
    }
    if (raw == double.class || raw == Double.class || raw == float.class || raw == Float.class
        || raw == BigDecimal.class || raw == OptionalDouble.class) {
      return schema.put("type", "number");
    }
    if (raw.isEnum()) {
      ArrayNode values = schema.put("type", "string").putArray("enum");
      for (Object constant : raw.getEnumConstants()) {
        values.add(((Enum<?>) constant).name());
      }
      return schema;
    }
    if (raw == Optional.class) {
      return of(argument(type, 0, where), where, depth + 1);
    }
    if (raw.isArray() || Collection.class.isAssignableFrom(raw)) {
      Type item =
          type instanceof GenericArrayType array
              ? array.getGenericComponentType()
              : raw.isArray() ? raw.getComponentType() : argument(type, 0, where);
      schema.put("type", "array");
      schema.set("items", of(item, where, depth + 1));
      return schema;
    }
    if (Map.class.isAssignableFrom(raw)) {
      if (raw(argument(type, 0, where)) != String.class) {
        throw new ToolDefinitionException(where + ": a map's keys must be String (JSON objects have text keys)");
      }
      schema.put("type", "object");
      schema.set("additionalProperties", of(argument(type, 1, where), where, depth + 1));
      return schema;
    }
    if (raw.isRecord()) {
      schema.put("type", "object");
      ObjectNode properties = schema.putObject("properties");
      ArrayNode required = JSON.arrayNode();
      for (RecordComponent component : raw.getRecordComponents()) {
        Arg arg = component.getAnnotation(Arg.class);
        String name = arg != null && !arg.name().isEmpty() ? arg.name() : component.getName();
        ObjectNode property = of(component.getGenericType(), where + "." + name, depth + 1);
        if (arg != null && !arg.description().isEmpty()) {
          property.put("description", arg.description());
        }
        properties.set(name, property);
        if (!isOptional(component.getGenericType())) {
          required.add(name);
        }
      }
      if (!required.isEmpty()) {
        schema.set("required", required);
      }
      schema.put("additionalProperties", false);
      return schema;
    }
    throw new ToolDefinitionException(
        where + ": type " + type.getTypeName() + " has no JSON Schema here; use String, numbers,"
            + " boolean, enums, lists, Map<String, T>, Optional<T> or a record of those");
  }

  private static Type argument(Type type, int index, String where) {
    if (type instanceof ParameterizedType parameterized) {
      return parameterized.getActualTypeArguments()[index];
    }
    throw new ToolDefinitionException(
        where + ": " + type.getTypeName() + " needs its type arguments (List<String>, not List)");
  }

  static Class<?> raw(Type type) {
    if (type instanceof Class<?> cls) {
      return cls;
    }
    if (type instanceof ParameterizedType parameterized) {
      return (Class<?>) parameterized.getRawType();
    }
    if (type instanceof GenericArrayType array) {
      return java.lang.reflect.Array.newInstance(raw(array.getGenericComponentType()), 0).getClass();
    }
    return Object.class; // type variables and wildcards: refused by of()
  }
}
