package cdcenrich;

import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.cfg.JsonNodeFeature;
import com.fasterxml.jackson.databind.json.JsonMapper;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.math.RoundingMode;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF5;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataType;

/**
 * The JVM fast pass of bronze decoding: one Debezium Kafka record -> a decoded row, for the
 * common, unambiguous shapes only.
 *
 * <p>{@code lakehouse/debezium.py}'s {@code decode_record} is the specification. This class
 * mirrors its acceptance rules and returns {@code fast = true} only when it is certain that
 * {@code decode_record} accepts the record and produces exactly the same values; anything
 * else (every malformed record, and valid but unusual ones: truncates, wrapped tombstones,
 * variable-scale decimals, an old-key header that is not a plain key...) is returned with
 * {@code fast = false} and decided by the Python pass, which names the quarantine reason.
 * A differential test (tests/test_bronze.py) holds the two to each other on valid and
 * fuzzed records.
 *
 * <p>Result struct: fast, op, key, before, after, source_ts_ms, source_lsn, source_tx_id,
 * source_snapshot, source_file, source_pos, source_row, event_ts_ms, unavailable_columns,
 * sequence (decimal(38,0)), old_key (a primary-key change's create, update or read: its
 * {@code __debezium.oldkey} header decoded like a key). Arguments: key bytes, value bytes,
 * Kafka partition, offset, the old-key header's bytes (null without one).
 */
public final class DebeziumDecoder implements UDF5<byte[], byte[], Integer, Long, byte[], Row> {
  private static final long serialVersionUID = 1L;

  static final String UNAVAILABLE = "__debezium_unavailable_value";
  static final String DECIMAL_LOGICAL = "org.apache.kafka.connect.data.Decimal";
  static final long MIN_MICROS = -62135596800000000L;
  static final long MAX_MICROS = 253402300799999999L;
  static final long MIN_DAYS = -719162L;
  static final long MAX_DAYS = 2932896L;
  static final double FLOAT_MAX = 3.4028234663852886e38;
  static final BigInteger MAX_SEQUENCE = BigInteger.TEN.pow(38).subtract(BigInteger.ONE);

  static final Pattern NUMERIC = Pattern.compile("[+-]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+)?");
  static final Pattern DIGITS = Pattern.compile("[0-9]+");
  static final Pattern BASE64 = Pattern.compile("(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?");
  static final Pattern DECIMAL_TEXT = Pattern.compile("[0-9A-Za-z+/=.\\-]*");
  static final Pattern ISO_TIMESTAMP = Pattern.compile(
      "([0-9]{4})-([0-9]{2})-([0-9]{2})[T ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\\.([0-9]{1,9}))?(Z|[+-][0-9]{2}:[0-9]{2})?");
  static final Pattern ISO_DATE = Pattern.compile("([0-9]{4})-([0-9]{2})-([0-9]{2})");
  static final Pattern DECIMAL_TYPE = Pattern.compile("decimal\\((\\d+),(\\d+)\\)");
  static final Pattern PRINTABLE_ASCII = Pattern.compile("[ -~]*");
  static final Pattern TRAILING_NUMBER = Pattern.compile("([0-9]+)$");

  private static final ObjectMapper MAPPER = JsonMapper.builder()
      .enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS)
      .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
      .disable(JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS)
      .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
      .configure(JsonNodeFeature.STRIP_TRAILING_BIGDECIMAL_ZEROES, false)
      .build();

  /** Thrown for anything the fast pass does not decide: the record goes to Python. */
  static final class Slow extends Exception {
    private static final long serialVersionUID = 1L;

    Slow() {
      super(null, null, false, false);
    }
  }

  private static final Slow SLOW = new Slow();

  /** One declared column: its name and Spark type name (bigint, decimal(12,2), ...). */
  static final class Col implements java.io.Serializable {
    private static final long serialVersionUID = 1L;
    final String name;
    final String type;
    final int precision;
    final int scale;

    Col(String name, String type) {
      this.name = name;
      this.type = type;
      Matcher m = DECIMAL_TYPE.matcher(type);
      if (m.matches()) {
        precision = Integer.parseInt(m.group(1));
        scale = Integer.parseInt(m.group(2));
      } else {
        precision = -1;
        scale = -1;
      }
    }
  }

  static final Col TS_MS = new Col("ts_ms", "bigint");
  static final Col LSN = new Col("lsn", "bigint");
  static final Col TX_ID = new Col("txId", "bigint");
  static final Col FILE = new Col("file", "string");
  static final Col POS = new Col("pos", "bigint");
  static final Col ROW = new Col("row", "int");

  private final Col[] columns;
  private final Col[] primaryKey;
  private final int[] primaryKeyPositions; // of each primary-key column among `columns`
  private final String sequence;
  private static final int RESULT_WIDTH = 16;

  /**
   * @param columns declared columns as "name:type" (types as in the pipeline file)
   * @param primaryKey primary-key column names, in key order
   * @param sequence the ordering rule: postgres, mysql or ts_ms
   */
  public DebeziumDecoder(String[] columns, String[] primaryKey, String sequence) {
    this.columns = new Col[columns.length];
    Map<String, Col> byName = new HashMap<>();
    for (int i = 0; i < columns.length; i++) {
      int colon = columns[i].indexOf(':');
      Col c = new Col(columns[i].substring(0, colon), columns[i].substring(colon + 1));
      this.columns[i] = c;
      byName.put(c.name, c);
    }
    this.primaryKey = new Col[primaryKey.length];
    this.primaryKeyPositions = new int[primaryKey.length];
    for (int i = 0; i < primaryKey.length; i++) {
      Col c = byName.get(primaryKey[i]);
      if (c == null) {
        throw new IllegalArgumentException("primary key column " + primaryKey[i] + " is not declared");
      }
      this.primaryKey[i] = c;
      this.primaryKeyPositions[i] = java.util.Arrays.asList(this.columns).indexOf(c);
    }
    if (!sequence.equals("postgres") && !sequence.equals("mysql") && !sequence.equals("ts_ms")) {
      throw new IllegalArgumentException("unknown sequence rule " + sequence);
    }
    this.sequence = sequence;
  }

  /**
   * A column decoding (key, value, partition, offset, old-key header) for one source: the UDF, marked
   * non-deterministic so the optimizer evaluates it once per record however many of its
   * fields are read. (A Java entry point: py4j's choice among functions.udf's overloads is
   * not reliable.)
   */
  public static Column column(String[] columns, String[] primaryKey, String sequence, DataType resultType,
      Column key, Column value, Column partition, Column offset, Column oldKey) {
    UserDefinedFunction udf = functions.udf(new DebeziumDecoder(columns, primaryKey, sequence), resultType);
    return udf.asNondeterministic().apply(key, value, partition, offset, oldKey);
  }

  @Override
  public Row call(byte[] key, byte[] value, Integer partition, Long offset, byte[] oldKey) {
    try {
      return RowFactory.create(decode(key, value, partition, offset, oldKey));
    } catch (Slow | RuntimeException e) {
      Object[] out = new Object[RESULT_WIDTH];
      out[0] = Boolean.FALSE;
      return RowFactory.create(out);
    }
  }

  // ------------------------------------------------------------------------- the record

  private Object[] decode(byte[] key, byte[] value, Integer partition, Long offset, byte[] oldKey) throws Slow {
    Object[] out = new Object[RESULT_WIDTH];
    out[0] = Boolean.TRUE;
    Object[] keyRow = null;
    if (key != null) {
      keyRow = keyDocument(key);
      out[2] = RowFactory.create(keyRow);
    }
    if (value == null) {
      if (keyRow == null) {
        throw SLOW;
      }
      out[1] = "tombstone";
      return out;
    }
    JsonNode env = parse(value);
    JsonNode valueSchema = null;
    if (isWrapper(env)) {
      valueSchema = env.get("schema");
      env = env.get("payload");
    }
    if (env == null || !env.isObject()) {
      throw SLOW;
    }
    JsonNode opNode = env.get("op");
    if (opNode == null || !opNode.isTextual()) {
      throw SLOW;
    }
    String op = opNode.textValue();
    boolean truncate = op.equals("t");
    if (!(truncate || op.equals("c") || op.equals("r") || op.equals("u") || op.equals("d"))) {
      throw SLOW;
    }
    JsonNode src = env.get("source");
    if (src == null || !src.isObject()) {
      throw SLOW;
    }
    if (truncate != (keyRow == null)) {
      throw SLOW; // a truncate has no key, every other change has one
    }
    List<String> unavailable = new ArrayList<>();
    Object[] before = image(env, "before", valueSchema, keyRow, null, value);
    Object[] after = image(env, "after", valueSchema, keyRow, unavailable, value);
    if (truncate && (before != null || after != null)) {
      throw SLOW;
    }
    if (after == null && !op.equals("d") && !truncate) {
      throw SLOW;
    }
    if (before == null && op.equals("d")) {
      throw SLOW;
    }
    out[1] = op;
    out[3] = before == null ? null : RowFactory.create(before);
    out[4] = after == null ? null : RowFactory.create(after);
    Long tsMs = (Long) typedField(src, TS_MS);
    Long lsn = (Long) typedField(src, LSN);
    out[5] = tsMs;
    out[6] = lsn;
    out[7] = typedField(src, TX_ID);
    out[8] = snapshot(src.get("snapshot"));
    String file = (String) typedField(src, FILE);
    Long pos = (Long) typedField(src, POS);
    Integer rowNo = (Integer) typedField(src, ROW);
    out[9] = file;
    out[10] = pos;
    out[11] = rowNo;
    out[12] = typedField(env, TS_MS);
    out[13] = unavailable.isEmpty() ? null : String.join(",", unavailable);
    out[14] = sequence(op, tsMs, lsn, file, pos, rowNo, partition, offset);
    if (oldKey != null && (op.equals("c") || op.equals("r") || op.equals("u"))) {
      out[15] = RowFactory.create(keyDocument(oldKey)); // decode_record reads the header for these alone
    }
    return out;
  }

  /** A key's JSON (the record's key, or an old-key header), bare or wrapped, decoded. */
  private Object[] keyDocument(byte[] raw) throws Slow {
    JsonNode doc = parse(raw);
    Map<String, String[]> hints = null;
    if (isWrapper(doc)) {
      hints = structFields(doc.get("schema"));
      doc = doc.get("payload");
    }
    return decodeKey(doc, hints, raw);
  }

  /** Strict JSON as Python's json module reads it: UTF-8 (checked), one value, no NaN. Parsed
   * from text, never bytes: Jackson would skip a byte-order mark and detect UTF-16/32. */
  static JsonNode parse(byte[] raw) throws Slow {
    String text = null;
    for (byte b : raw) {
      if (b < 0) { // not ASCII: Python rejects invalid UTF-8 (surrogates, overlongs) strictly
        try {
          text = StandardCharsets.UTF_8.newDecoder()
              .onMalformedInput(CodingErrorAction.REPORT)
              .onUnmappableCharacter(CodingErrorAction.REPORT)
              .decode(ByteBuffer.wrap(raw)).toString();
        } catch (CharacterCodingException e) {
          throw SLOW;
        }
        break;
      }
    }
    if (text == null) {
      text = new String(raw, StandardCharsets.US_ASCII);
    }
    if (!text.isEmpty() && text.charAt(0) == '\uFEFF') {
      throw SLOW; // Python's json.loads rejects a byte-order mark
    }
    JsonNode node;
    try {
      node = MAPPER.readTree(text);
    } catch (java.io.IOException e) {
      throw SLOW;
    }
    if (node == null || node.isMissingNode()) {
      throw SLOW;
    }
    return node;
  }

  static boolean isWrapper(JsonNode doc) {
    return doc.isObject() && doc.has("schema") && doc.has("payload");
  }

  /** A Connect struct schema -> {field: [name, type]} (first entry per field), as Python's. */
  static Map<String, String[]> structFields(JsonNode schema) {
    Map<String, String[]> out = new HashMap<>();
    JsonNode fields = schema != null && schema.isObject() ? schema.get("fields") : null;
    if (fields == null || !fields.isArray()) {
      return out;
    }
    for (JsonNode entry : fields) {
      if (entry.isObject()) {
        JsonNode field = entry.get("field");
        if (field != null && field.isTextual() && !out.containsKey(field.textValue())) {
          JsonNode name = entry.get("name");
          JsonNode type = entry.get("type");
          out.put(field.textValue(), new String[] {
              name != null && name.isTextual() ? name.textValue() : null,
              type != null && type.isTextual() ? type.textValue() : null});
        }
      }
    }
    return out;
  }

  static Map<String, String[]> imageFields(JsonNode schema, String image) {
    JsonNode fields = schema != null && schema.isObject() ? schema.get("fields") : null;
    if (fields == null || !fields.isArray()) {
      return new HashMap<>();
    }
    for (JsonNode entry : fields) {
      if (entry.isObject()) {
        JsonNode field = entry.get("field");
        if (field != null && field.isTextual() && field.textValue().equals(image)) {
          return structFields(entry);
        }
      }
    }
    return new HashMap<>();
  }

  /** Whether the text holds "-0": only then can a JSON number be a negative zero, which
   * Python keeps (-0.0) and a BigDecimal cannot represent. */
  static boolean mentionsMinusZero(byte[] raw) {
    for (int i = 0; i + 1 < raw.length; i++) {
      if (raw[i] == '-' && raw[i + 1] == '0') {
        return true;
      }
    }
    return false;
  }

  private Object[] decodeKey(JsonNode doc, Map<String, String[]> hints, byte[] text) throws Slow {
    if (doc == null || !doc.isObject() || doc.size() != primaryKey.length) {
      throw SLOW;
    }
    Object[] out = new Object[primaryKey.length];
    for (int i = 0; i < primaryKey.length; i++) {
      JsonNode raw = doc.get(primaryKey[i].name);
      if (raw == null || raw.isNull()) {
        throw SLOW;
      }
      out[i] = convert(primaryKey[i], raw, hints == null ? null : hints.get(primaryKey[i].name), text);
    }
    return out;
  }

  private Object[] image(JsonNode env, String image, JsonNode schema, Object[] keyRow, List<String> unavailable,
      byte[] text) throws Slow {
    JsonNode doc = env.get(image);
    if (doc == null || doc.isNull()) {
      return null;
    }
    if (!doc.isObject()) {
      throw SLOW;
    }
    Map<String, String[]> hints = schema == null ? null : imageFields(schema, image);
    Object[] out = new Object[columns.length];
    for (int i = 0; i < columns.length; i++) {
      Col c = columns[i];
      JsonNode raw = doc.get(c.name);
      if (raw == null || raw.isNull()) {
        out[i] = null;
      } else if (raw.isTextual() && raw.textValue().equals(UNAVAILABLE)) {
        out[i] = null;
        if (unavailable != null) {
          unavailable.add(c.name);
        }
      } else {
        out[i] = convert(c, raw, hints == null ? null : hints.get(c.name), text);
      }
    }
    if (keyRow == null) {
      throw SLOW;
    }
    for (int k = 0; k < primaryKey.length; k++) {
      if (!same(out[primaryKeyPositions[k]], keyRow[k])) {
        throw SLOW;
      }
    }
    return out;
  }

  static boolean same(Object a, Object b) {
    if (a == null || b == null) {
      return false;
    }
    if (a instanceof BigDecimal && b instanceof BigDecimal) {
      return ((BigDecimal) a).compareTo((BigDecimal) b) == 0;
    }
    return a.equals(b);
  }

  private static Object typedField(JsonNode doc, Col field) throws Slow {
    JsonNode raw = doc.get(field.name);
    if (raw == null || raw.isNull()) {
      return null;
    }
    return convert(field, raw, null, null); // integers and strings: no number text needed
  }

  private static String snapshot(JsonNode raw) throws Slow {
    if (raw == null || raw.isNull()) {
      return null;
    }
    if (raw.isTextual()) {
      return wellFormed(raw.textValue());
    }
    if (raw.isBoolean()) {
      return raw.booleanValue() ? "true" : "false";
    }
    throw SLOW;
  }

  private Object sequence(String op, Long tsMs, Long lsn, String file, Long pos, Integer row, Integer partition, Long offset) throws Slow {
    BigInteger value;
    if (sequence.equals("postgres")) {
      if (lsn == null || lsn < 0) {
        throw SLOW;
      }
      value = BigInteger.valueOf(lsn).multiply(BigInteger.TEN).add(BigInteger.valueOf(op.equals("d") ? 0 : 1));
    } else if (sequence.equals("mysql")) {
      if (file == null || pos == null || row == null || !PRINTABLE_ASCII.matcher(file).matches()) {
        throw SLOW;
      }
      Matcher m = TRAILING_NUMBER.matcher(file);
      if (!m.find() || m.group(1).length() > 17 || pos < 0 || pos > 99_999_999_999_999L || row < 0 || row > 999_999) {
        throw SLOW;
      }
      value = new BigInteger(m.group(1)).multiply(BigInteger.TEN.pow(20))
          .add(BigInteger.valueOf(pos).multiply(BigInteger.valueOf(1_000_000)))
          .add(BigInteger.valueOf(row));
    } else {
      if (tsMs == null || tsMs < 0 || tsMs > 9_999_999_999_999L || partition == null || partition < 0
          || partition >= 1_000_000 || offset == null || offset < 0) {
        throw SLOW;
      }
      value = BigInteger.valueOf(tsMs).multiply(BigInteger.TEN.pow(24))
          .add(BigInteger.valueOf(partition).multiply(BigInteger.TEN.pow(18)))
          .add(BigInteger.valueOf(offset));
    }
    if (value.signum() < 0 || value.compareTo(MAX_SEQUENCE) > 0) {
      throw SLOW;
    }
    return new BigDecimal(value);
  }

  // ------------------------------------------------------------------------- column values

  /** One non-null JSON value -> the Java value of the column's Spark type (convert_value). */
  /** `record`: the record's bytes, read only to tell a zero fraction's sign. */
  static Object convert(Col column, JsonNode raw, String[] hint, byte[] record) throws Slow {
    String name = hint == null ? null : hint[0];
    String connectType = hint == null ? null : hint[1];
    switch (column.type) {
      case "smallint": {
        long v = integral(raw);
        if (v < Short.MIN_VALUE || v > Short.MAX_VALUE) {
          throw SLOW;
        }
        return (short) v;
      }
      case "int": {
        long v = integral(raw);
        if (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE) {
          throw SLOW;
        }
        return (int) v;
      }
      case "bigint":
        return integral(raw);
      case "double":
        return number(raw, Double.MAX_VALUE, record);
      case "float":
        return (float) number(raw, FLOAT_MAX, record);
      case "boolean":
        if (!raw.isBoolean()) {
          throw SLOW;
        }
        return raw.booleanValue();
      case "string":
        if (!raw.isTextual()) {
          throw SLOW;
        }
        return wellFormed(raw.textValue());
      case "timestamp":
        return timestamp(raw, name);
      case "date":
        return date(raw);
      default:
        if (column.precision < 0) {
          throw SLOW;
        }
        return decimal(column, raw, name, connectType);
    }
  }

  /** A JSON integer (not a boolean, not a fraction) that fits a long. */
  static long integral(JsonNode raw) throws Slow {
    if (!raw.isIntegralNumber() || !raw.canConvertToLong()) {
      throw SLOW;
    }
    return raw.longValue();
  }

  /** Python's float(int | Decimal): correctly rounded, rejected beyond the type's range. */
  static double number(JsonNode raw, double limit, byte[] record) throws Slow {
    String text;
    if (raw.isIntegralNumber()) {
      text = raw.bigIntegerValue().toString();
    } else if (raw.isBigDecimal()) {
      BigDecimal d = raw.decimalValue();
      if (d.signum() == 0 && (record == null || mentionsMinusZero(record))) {
        throw SLOW; // "-0.0" is -0.0 in Python; BigDecimal has no negative zero
      }
      text = d.toString();
    } else {
      throw SLOW;
    }
    double v = Double.parseDouble(text);
    if (!(Math.abs(v) <= limit)) {
      throw SLOW;
    }
    return v;
  }

  static String wellFormed(String text) throws Slow {
    for (int i = 0; i < text.length(); i++) {
      char ch = text.charAt(i);
      if (Character.isHighSurrogate(ch)) {
        if (i + 1 >= text.length() || !Character.isLowSurrogate(text.charAt(i + 1))) {
          throw SLOW;
        }
        i++;
      } else if (Character.isLowSurrogate(ch)) {
        throw SLOW;
      }
    }
    return text;
  }

  static Instant timestamp(JsonNode raw, String name) throws Slow {
    if (raw.isIntegralNumber()) {
      long n = integral(raw);
      long micros;
      if ("io.debezium.time.Timestamp".equals(name) || "org.apache.kafka.connect.data.Timestamp".equals(name)) {
        try {
          micros = Math.multiplyExact(n, 1000L);
        } catch (ArithmeticException e) {
          throw SLOW;
        }
      } else if ("io.debezium.time.NanoTimestamp".equals(name)) {
        micros = Math.floorDiv(n, 1000L);
      } else {
        micros = n;
      }
      if (micros < MIN_MICROS || micros > MAX_MICROS) {
        throw SLOW;
      }
      return Instant.ofEpochSecond(Math.floorDiv(micros, 1_000_000L), Math.floorMod(micros, 1_000_000L) * 1000L);
    }
    Matcher m = matched(raw, ISO_TIMESTAMP);
    int year = Integer.parseInt(m.group(1));
    if (year < 2 || year > 9998) {
      throw SLOW; // near the ends of the range Python's conversion to UTC can overflow
    }
    String fraction = m.group(7) == null ? "" : m.group(7);
    fraction = (fraction + "000000").substring(0, 6);
    ZoneOffset zone = ZoneOffset.UTC;
    String z = m.group(8);
    if (z != null && !z.equals("Z")) {
      int hours = Integer.parseInt(z.substring(1, 3));
      int minutes = Integer.parseInt(z.substring(4, 6));
      if (hours > 17 || minutes > 59) {
        throw SLOW;
      }
      int sign = z.charAt(0) == '+' ? 1 : -1;
      zone = ZoneOffset.ofHoursMinutes(sign * hours, sign * minutes);
    }
    try {
      LocalDateTime local = LocalDateTime.of(year, Integer.parseInt(m.group(2)), Integer.parseInt(m.group(3)),
          Integer.parseInt(m.group(4)), Integer.parseInt(m.group(5)), Integer.parseInt(m.group(6)),
          Integer.parseInt(fraction) * 1000);
      return local.toInstant(zone);
    } catch (java.time.DateTimeException e) {
      throw SLOW;
    }
  }

  /** A JSON string wholly matching `pattern` (Java's `matches`: no trailing-newline leeway). */
  static Matcher matched(JsonNode raw, Pattern pattern) throws Slow {
    if (!raw.isTextual()) {
      throw SLOW;
    }
    Matcher m = pattern.matcher(raw.textValue());
    if (!m.matches()) {
      throw SLOW;
    }
    return m;
  }

  static LocalDate date(JsonNode raw) throws Slow {
    if (raw.isIntegralNumber()) {
      long days = integral(raw);
      if (days < MIN_DAYS || days > MAX_DAYS) {
        throw SLOW;
      }
      return LocalDate.ofEpochDay(days);
    }
    Matcher m = matched(raw, ISO_DATE);
    int year = Integer.parseInt(m.group(1));
    if (year < 1) {
      throw SLOW;
    }
    try {
      return LocalDate.of(year, Integer.parseInt(m.group(2)), Integer.parseInt(m.group(3)));
    } catch (java.time.DateTimeException e) {
      throw SLOW;
    }
  }

  static BigDecimal decimal(Col column, JsonNode raw, String name, String connectType) throws Slow {
    BigDecimal number;
    if (raw.isIntegralNumber()) {
      number = new BigDecimal(raw.bigIntegerValue());
    } else if (raw.isBigDecimal()) {
      number = raw.decimalValue();
    } else if (raw.isTextual()) {
      String text = raw.textValue();
      if (!DECIMAL_TEXT.matcher(text).matches()) {
        throw SLOW; // whitespace, a trailing newline...: Python's rules differ in detail there
      }
      if (isNumber(text, column.scale, name, connectType)) {
        if (!NUMERIC.matcher(text).matches()) {
          throw SLOW;
        }
        try {
          number = new BigDecimal(text);
        } catch (NumberFormatException e) {
          throw SLOW;
        }
      } else {
        if (text.isEmpty() || !BASE64.matcher(text).matches()) {
          throw SLOW;
        }
        byte[] bytes = Base64.getDecoder().decode(text);
        number = new BigDecimal(new BigInteger(bytes), column.scale);
      }
    } else {
      throw SLOW; // VariableScaleDecimal objects and everything else: Python
    }
    if (number.precision() - number.scale() > 40 || number.scale() > 100) {
      throw SLOW;
    }
    BigDecimal rounded = number.setScale(column.scale, RoundingMode.HALF_UP);
    if (rounded.abs().compareTo(BigDecimal.TEN.pow(column.precision - column.scale)) >= 0) {
      throw SLOW;
    }
    return rounded;
  }

  /** debezium.decimal_string_is_number. */
  static boolean isNumber(String text, int scale, String name, String connectType) {
    if (DECIMAL_LOGICAL.equals(name)) {
      return false;
    }
    if (connectType != null && (connectType.equals("string") || connectType.equals("double")
        || connectType.equals("float") || connectType.equals("float64") || connectType.equals("float32"))) {
      return true;
    }
    if (!NUMERIC.matcher(text).matches()) {
      return false;
    }
    return !(scale > 0 && DIGITS.matcher(text).matches() && BASE64.matcher(text).matches());
  }
}
