//===- Interop.cpp - ops/ types and values <-> MLIR types and attributes --===//
#include "sluice/compiler/Interop.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;

namespace sluice::compiler {

Type convertElemType(MLIRContext *ctx, ElemType elem) {
  auto integer = [&](unsigned width, bool isUnsigned) {
    return IntegerType::get(
        ctx, width, isUnsigned ? IntegerType::Unsigned : IntegerType::Signless);
  };
  switch (elem) {
  case ElemType::U8:
    return integer(8, true);
  case ElemType::I8:
    return integer(8, false);
  case ElemType::U16:
    return integer(16, true);
  case ElemType::I16:
    return integer(16, false);
  case ElemType::I32:
    return integer(32, false);
  case ElemType::I64:
    return integer(64, false);
  case ElemType::F16:
    return Float16Type::get(ctx);
  case ElemType::BF16:
    return BFloat16Type::get(ctx);
  case ElemType::F32:
    return Float32Type::get(ctx);
  case ElemType::F64:
    return Float64Type::get(ctx);
  case ElemType::Bool:
    return integer(1, false);
  case ElemType::Bytes:
    return ir::BytesType::get(ctx);
  case ElemType::String:
    return ir::StringType::get(ctx);
  }
  llvm_unreachable("unknown ElemType");
}

std::optional<ElemType> convertElemType(Type type) {
  if (auto intType = dyn_cast<IntegerType>(type)) {
    if (intType.isSigned())
      return std::nullopt; // sluice's signed ints are signless, like arith's
    bool isUnsigned = intType.isUnsigned();
    switch (intType.getWidth()) {
    case 1:
      return isUnsigned ? std::nullopt : std::optional(ElemType::Bool);
    case 8:
      return isUnsigned ? ElemType::U8 : ElemType::I8;
    case 16:
      return isUnsigned ? ElemType::U16 : ElemType::I16;
    case 32:
      return isUnsigned ? std::nullopt : std::optional(ElemType::I32);
    case 64:
      return isUnsigned ? std::nullopt : std::optional(ElemType::I64);
    default:
      return std::nullopt;
    }
  }
  if (type.isF16())
    return ElemType::F16;
  if (type.isBF16())
    return ElemType::BF16;
  if (type.isF32())
    return ElemType::F32;
  if (type.isF64())
    return ElemType::F64;
  if (isa<ir::BytesType>(type))
    return ElemType::Bytes;
  if (isa<ir::StringType>(type))
    return ElemType::String;
  return std::nullopt;
}

RankedTensorType convertFieldType(MLIRContext *ctx, const FieldType &field) {
  SmallVector<int64_t> shape;
  for (int64_t dim : field.shape)
    shape.push_back(dim == kDynamic ? ShapedType::kDynamic : dim);
  return RankedTensorType::get(shape, convertElemType(ctx, field.elem));
}

std::optional<FieldType> convertFieldType(Type type) {
  auto tensor = dyn_cast_or_null<RankedTensorType>(type);
  if (!tensor || tensor.getEncoding())
    return std::nullopt;
  std::optional<ElemType> elem = convertElemType(tensor.getElementType());
  if (!elem)
    return std::nullopt;
  FieldType field(*elem);
  for (int64_t dim : tensor.getShape())
    field.shape.push_back(ShapedType::isDynamic(dim) ? kDynamic : dim);
  return field;
}

ir::RecordType convertRecordType(MLIRContext *ctx, const RecordType &record) {
  SmallVector<StringAttr> names;
  SmallVector<Type> types;
  for (const Field &field : record.fields()) {
    names.push_back(StringAttr::get(ctx, field.name));
    types.push_back(convertFieldType(ctx, field.type));
  }
  return ir::RecordType::get(ctx, names, types);
}

RecordType convertRecordType(ir::RecordType record) {
  std::vector<Field> fields;
  for (auto [name, type] :
       llvm::zip_equal(record.getNames(), record.getTypes())) {
    std::optional<FieldType> field = convertFieldType(type);
    assert(field && "unverified !sluice.record");
    fields.push_back({name.str(), field ? *field : FieldType()});
  }
  return RecordType(std::move(fields));
}

ir::StreamType convertStreamType(MLIRContext *ctx, const RecordType &record) {
  return ir::StreamType::get(ctx, convertRecordType(ctx, record));
}

/// The spec for the members of a list parameter: StructList items are
/// Structs, other lists have scalar items of the list's element kind.
static const ParamSpec *itemSpec(const ParamSpec *spec, ParamSpec &scratch) {
  if (!spec)
    return nullptr;
  switch (spec->kind) {
  case ParamKind::StructList:
    scratch = *spec;
    scratch.kind = ParamKind::Struct;
    return &scratch;
  case ParamKind::FloatList:
    scratch = ParamSpec();
    scratch.kind = ParamKind::Float;
    return &scratch;
  default:
    return nullptr;
  }
}

Attribute convertValue(MLIRContext *ctx, const Value &value,
                       const ParamSpec *spec) {
  Builder b(ctx);
  bool wantFloat = spec && (spec->kind == ParamKind::Float ||
                            spec->kind == ParamKind::FloatList);
  switch (value.kind()) {
  case Value::Kind::Null:
    return b.getUnitAttr();
  case Value::Kind::Bool:
    return b.getBoolAttr(value.asBool());
  case Value::Kind::Int:
    if (wantFloat)
      return b.getF64FloatAttr(value.asDouble());
    return b.getI64IntegerAttr(value.asInt());
  case Value::Kind::Float:
    return b.getF64FloatAttr(value.asDouble());
  case Value::Kind::String:
    return b.getStringAttr(value.asString());
  case Value::Kind::List: {
    ParamSpec scratch;
    const ParamSpec *item = itemSpec(spec, scratch);
    SmallVector<Attribute> items;
    for (const Value &v : value.items())
      items.push_back(convertValue(ctx, v, item));
    return b.getArrayAttr(items);
  }
  case Value::Kind::Map: {
    bool isStruct = spec && (spec->kind == ParamKind::Struct ||
                             spec->kind == ParamKind::StructList);
    SmallVector<NamedAttribute> entries;
    for (const auto &[key, v] : value.entries()) {
      const ParamSpec *member = nullptr;
      if (isStruct)
        for (const ParamSpec &m : spec->members)
          if (m.name == key)
            member = &m;
      entries.push_back(b.getNamedAttr(key, convertValue(ctx, v, member)));
    }
    return b.getDictionaryAttr(entries);
  }
  }
  llvm_unreachable("unknown Value kind");
}

DictionaryAttr convertParams(MLIRContext *ctx, const Value &params,
                             const OpDef *def) {
  SmallVector<NamedAttribute> entries;
  for (const auto &[key, v] : params.entries()) {
    const ParamSpec *spec = def ? def->findParam(key) : nullptr;
    entries.push_back(
        NamedAttribute(StringAttr::get(ctx, key), convertValue(ctx, v, spec)));
  }
  return DictionaryAttr::get(ctx, entries);
}

bool convertAttribute(Attribute attr, Value &value, std::string &error) {
  if (auto b = dyn_cast<BoolAttr>(attr)) {
    value = Value::boolean(b.getValue());
    return true;
  }
  if (auto i = dyn_cast<IntegerAttr>(attr)) {
    if (i.getType().isUnsignedInteger())
      value = Value::integer(static_cast<int64_t>(i.getValue().getZExtValue()));
    else
      value = Value::integer(i.getValue().getSExtValue());
    return true;
  }
  if (auto f = dyn_cast<FloatAttr>(attr)) {
    value = Value::real(f.getValueAsDouble());
    return true;
  }
  if (auto s = dyn_cast<StringAttr>(attr)) {
    value = Value::string(s.str());
    return true;
  }
  if (isa<UnitAttr>(attr)) {
    value = Value::null();
    return true;
  }
  if (auto array = dyn_cast<ArrayAttr>(attr)) {
    std::vector<Value> items(array.size());
    for (auto [i, item] : llvm::enumerate(array))
      if (!convertAttribute(item, items[i], error))
        return false;
    value = Value::list(std::move(items));
    return true;
  }
  if (auto ints = dyn_cast<DenseI64ArrayAttr>(attr)) {
    std::vector<Value> items;
    for (int64_t i : ints.asArrayRef())
      items.push_back(Value::integer(i));
    value = Value::list(std::move(items));
    return true;
  }
  if (auto floats = dyn_cast<DenseF64ArrayAttr>(attr)) {
    std::vector<Value> items;
    for (double d : floats.asArrayRef())
      items.push_back(Value::real(d));
    value = Value::list(std::move(items));
    return true;
  }
  if (auto dict = dyn_cast<DictionaryAttr>(attr)) {
    Value map = Value::map();
    for (NamedAttribute entry : dict) {
      Value v;
      if (!convertAttribute(entry.getValue(), v, error))
        return false;
      map.set(entry.getName().str(), std::move(v));
    }
    value = std::move(map);
    return true;
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "attribute " << attr
     << " is no parameter value (use integers, f64 floats, booleans, "
        "strings, arrays and dictionaries)";
  error = os.str();
  return false;
}

} // namespace sluice::compiler
