//===- VocabularyTie.h - ODS enums tied to the shared vocabulary -*- C++ -*-===//
//
// The plan and sched dialects' enums carry the values of the shared
// vocabulary (mfsdp/Vocabulary.h), case by case, so converting is a cast.
// Inside a dialect's namespace, after its generated enums:
//
//   MFSDP_TIE_CASE(ReduceDType::bf16, ::mfsdp::ReduceDType::BF16)  // each case
//   MFSDP_TIE_ENUM(ReduceDType, ::mfsdp::ReduceDType)  // the count, and
//                                                      // toVocab / fromVocab
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_DIALECTS_VOCABULARYTIE_H
#define MFSDP_DIALECTS_VOCABULARYTIE_H

#include "mfsdp/Vocabulary.h"

#include <cstdint>

/// One ODS case has its vocabulary value.
#define MFSDP_TIE_CASE(ods, vocab)                                             \
  static_assert(static_cast<int32_t>(ods) == static_cast<int32_t>(vocab),     \
                #ods " must have the value of " #vocab);

/// The ODS enum `Ods` (generated with getMaxEnumValFor<Ods>) has as many
/// cases as `Vocab`, and converts to and from it by a cast.
#define MFSDP_TIE_ENUM(Ods, Vocab)                                             \
  static_assert(getMaxEnumValFor##Ods() + 1 == ::mfsdp::enumValues<Vocab>().size(), \
                #Ods " must have the cases of " #Vocab);                       \
  inline Vocab toVocab(Ods e) { return static_cast<Vocab>(e); }                \
  inline Ods fromVocab(Vocab e) { return static_cast<Ods>(e); }

#endif // MFSDP_DIALECTS_VOCABULARYTIE_H
