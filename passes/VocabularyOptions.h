//===- VocabularyOptions.h - Typed options over the vocabulary --*- C++ -*-===//
//
// Pass, pipeline and tool options whose values are a vocabulary enum
// (mfsdp/Vocabulary.h) are `llvm::cl::opt<Enum>` with the values of the
// enum's one name table, so the option parser refuses anything else and
// lists the valid spellings ("unknown policy 'lion'; expected graph, adamw,
// sgd, muon or mixed_muon_adamw"):
//
//   Option<"policy", "policy", "::mfsdp::PolicyKind",
//          "::mfsdp::PolicyKind::AdamW", "...",
//          "::mfsdp::clValues<::mfsdp::PolicyKind>()">
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_PASSES_VOCABULARYOPTIONS_H
#define MFSDP_PASSES_VOCABULARYOPTIONS_H

#include "mfsdp/Vocabulary.h"

#include "llvm/Support/CommandLine.h"

namespace mfsdp {

/// llvm::cl's literal-value parser (llvm::cl::parser<DataType>) for a
/// vocabulary enum, whose error names the vocabulary and lists its values
/// instead of "Cannot find option named".
template <typename E>
class VocabularyParser : public llvm::cl::generic_parser_base {
protected:
  class OptionInfo : public GenericOptionInfo {
  public:
    OptionInfo(llvm::StringRef name, E v, llvm::StringRef helpStr)
        : GenericOptionInfo(name, helpStr), V(v) {}
    llvm::cl::OptionValue<E> V;
  };
  llvm::SmallVector<OptionInfo, 8> Values;

public:
  VocabularyParser(llvm::cl::Option &o) : generic_parser_base(o) {}

  using parser_data_type = E;

  unsigned getNumOptions() const override { return unsigned(Values.size()); }
  llvm::StringRef getOption(unsigned n) const override {
    return Values[n].Name;
  }
  llvm::StringRef getDescription(unsigned n) const override {
    return Values[n].HelpStr;
  }
  const llvm::cl::GenericOptionValue &getOptionValue(unsigned n) const override {
    return Values[n].V;
  }

  /// True on error.
  bool parse(llvm::cl::Option &o, llvm::StringRef argName, llvm::StringRef arg,
             E &v) {
    llvm::StringRef value = Owner.hasArgStr() ? arg : argName;
    for (const OptionInfo &info : Values)
      if (info.Name == value) {
        v = info.V.getValue();
        return false;
      }
    return o.error(unknownEnumMessage<E>(
        std::string_view(value.data(), value.size())));
  }

  template <typename DT>
  void addLiteralOption(llvm::StringRef name, const DT &v,
                        llvm::StringRef helpStr) {
    Values.push_back(OptionInfo(name, static_cast<E>(v), helpStr));
    llvm::cl::AddLiteralOption(Owner, name);
  }

  void removeLiteralOption(llvm::StringRef name) {
    unsigned n = findOption(name);
    if (n != Values.size())
      Values.erase(Values.begin() + n);
  }
};

/// An llvm::cl modifier, like llvm::cl::values(clEnumValN(...)), whose
/// values are every row of E's name table.
template <typename E> struct VocabularyValues {
  template <typename Opt> void apply(Opt &o) const {
    for (const auto &entry : vocabTable(E{}))
      o.getParser().addLiteralOption(
          llvm::StringRef(entry.name.data(), entry.name.size()), entry.value,
          "");
  }
};

template <typename E> VocabularyValues<E> clValues() { return {}; }

} // namespace mfsdp

/// Every llvm::cl::opt over these enums parses with VocabularyParser.
#define MFSDP_VOCAB_CL_PARSER(E)                                               \
  template <>                                                                  \
  class llvm::cl::parser<E> : public ::mfsdp::VocabularyParser<E> {            \
  public:                                                                      \
    using ::mfsdp::VocabularyParser<E>::VocabularyParser;                      \
  };
MFSDP_VOCAB_CL_PARSER(::mfsdp::PolicyOption)
MFSDP_VOCAB_CL_PARSER(::mfsdp::PolicyKind)
MFSDP_VOCAB_CL_PARSER(::mfsdp::RowMode)
MFSDP_VOCAB_CL_PARSER(::mfsdp::NsSplit)
MFSDP_VOCAB_CL_PARSER(::mfsdp::OwnerStrategy)
MFSDP_VOCAB_CL_PARSER(::mfsdp::GatherComm)
MFSDP_VOCAB_CL_PARSER(::mfsdp::OptimizerOrder)
MFSDP_VOCAB_CL_PARSER(::mfsdp::StepBaseline)
#undef MFSDP_VOCAB_CL_PARSER

#endif // MFSDP_PASSES_VOCABULARYOPTIONS_H
