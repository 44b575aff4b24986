#pragma once
// A temporary folder per test: <tmp>/xentlab-<tag>-<pid>-<test name>, emptied when made and
// removed at the end. TempFolder is the RAII object; TempFolderTest the fixture base that makes
// one in SetUp (the fixtures of the file tests derive from it with their tag).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

namespace xentlab::testing {

struct TempFolder {
  explicit TempFolder(const std::string& tag)
      : dir(std::filesystem::temp_directory_path() /
            ("xentlab-" + tag + "-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~TempFolder() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  std::string path(const std::string& name) const { return (dir / name).string(); }
  std::filesystem::path dir;
};

class TempFolderTest : public ::testing::Test {
 protected:
  explicit TempFolderTest(std::string tag) : tag_(std::move(tag)) {}
  void SetUp() override {
    folder_.emplace(tag_);
    dir_ = folder_->dir;
  }
  void TearDown() override { folder_.reset(); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;

 private:
  std::string tag_;
  std::optional<TempFolder> folder_;
};

}  // namespace xentlab::testing
