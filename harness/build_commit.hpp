#pragma once
// The git commit this build was made from (harness/build_commit.cmake writes the definitions at
// every build, so a commit made after configuring is the one recorded): the reports' provenance.
namespace xentlab {

/// 40 hexadecimal digits, or "" when the source is not a git checkout (or git is missing).
extern const char* const kBuildCommit;
/// Tracked files differed from the commit when it was built (meaningless when the commit is "").
extern const bool kBuildModified;

}  // namespace xentlab
